"""Which line of the user's kernel is running: findings and notes name it (`kernel.py:42 (in _fwd)`)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from gpuemu_ci.triton_cpu.call import Launch

_HERE = os.path.dirname(os.path.abspath(__file__))


def _triton_dir() -> str:
    import triton

    return str(os.path.dirname(os.path.abspath(triton.__file__)))  # triton is untyped here


Frame = tuple[str, int, str]  # (file, line, function) of a frame of user code


def named(frame: Frame) -> str:
    """`kernel.py:42 (in _fwd)`: a frame of user code as findings name it."""
    path, line, function = frame
    return f"{os.path.basename(path)}:{line} (in {function})"


def site(launch: Launch | None) -> str:
    """`kernel.py:42 (in _fwd)`: the innermost frame of user code (the kernel or a jit helper it called); during
    a replay of the launch, the line the traced pass was at. Inside a helper, the kernel's line that called it
    follows (`helpers.py:7 (in _rsqrt), called at kernel.py:42 (in _fwd)`): the bug may be in either."""
    if launch is not None and launch.replay_site is not None:
        return launch.replay_site
    found = user_frame()
    if found is None:
        return "an unknown line"
    text = named(found)
    if launch is not None and found[2] != launch.kernel:
        caller = _kernel_frame(launch.kernel)
        if caller is not None:
            text += f", called at {named(caller)}"
    return text


def _kernel_frame(kernel: str) -> Frame | None:
    """(file, line, function) of the running kernel's own frame (outside any helper), None when not found."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == kernel:
            return os.path.abspath(frame.f_code.co_filename), frame.f_lineno, kernel
        frame = frame.f_back  # type: ignore[assignment]
    return None


def user_frame() -> Frame | None:
    """(file, line, function) of the innermost frame of user code running now, None when there is none."""
    skip = (_triton_dir(), _HERE, os.path.dirname(np.__file__))
    frame = sys._getframe(1)
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if not name.startswith(skip):
            return name, frame.f_lineno, frame.f_code.co_name
        frame = frame.f_back  # type: ignore[assignment]
    return None
