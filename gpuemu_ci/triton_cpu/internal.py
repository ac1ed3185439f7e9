"""An exception of the Triton layer's own code, told apart from the kernel's: the tool's error (the case is not
judged, the run exits 3), never the op's failure. The exception the kernel's run started from (following
explicit `raise ... from` chains only: an exception merely handled nearby is no cause) was raised in the
layer's own files, not in Triton's, NumPy's or the user's, and not by one of the layer's functions that
evaluate the kernel's own values on its behalf (a Python `if` on a block, an index)."""

from __future__ import annotations

import os
from typing import Any, Protocol

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))


class _Noted(Protocol):
    internal_error: str


class LayerError(RuntimeError):
    """An exception of the layer's own code while it ran a kernel: the tool's error, never the op's failure
    (the case is not judged; the run exits 3)."""


# Functions of the layer that evaluate the kernel's own values on its behalf: what they raise is the kernel's.
_ON_KERNELS_BEHALF = frozenset({"_scalar_index", "_bool", "_index", "_uniform_scalar", "_transpose"})
_KERNELS_FAULTS = (
    "KernelFault",
    "NotImplementedError",
)  # the layer stopping a kernel; the interpreter's gaps


def raise_if_internal(call: _Noted, fn: Any, exc: BaseException) -> None:
    """Raise LayerError (noted in the call's report) when `exc` was raised by the layer's own code: the
    innermost frame of the exception it started from is in gpuemu_ci/triton_cpu."""
    origin = exc
    seen = {id(exc)}
    while origin.__cause__ is not None and id(origin.__cause__) not in seen:  # explicit chains only
        origin = origin.__cause__
        seen.add(id(origin))
    if type(origin).__name__ in _KERNELS_FAULTS or origin.__traceback__ is None:
        return
    frames = []
    tb: Any = origin.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    innermost = frames[-1].f_code
    if (
        not os.path.abspath(innermost.co_filename).startswith(_HERE)
        or innermost.co_name in _ON_KERNELS_BEHALF
    ):
        return
    user = next((f for f in reversed(frames) if not _internal_file(f.f_code.co_filename)), None)
    line = (
        f"{os.path.basename(user.f_code.co_filename)}:{user.f_lineno}"
        if user is not None
        else "an unknown line"
    )
    message = (
        f"internal error in the Triton layer (gpuemu-ci's own, not the kernel's) while running kernel "
        f"`{getattr(fn, '__name__', 'kernel')}` at {line}: {type(origin).__name__}: {origin} (in "
        f"{os.path.basename(innermost.co_filename)}:{frames[-1].f_lineno}, {innermost.co_name}); the case "
        "is not judged: please report it"
    )
    if not call.internal_error:
        call.internal_error = message
    raise LayerError(message) from exc


def _internal_file(name: str) -> bool:
    import triton

    path = os.path.abspath(name)
    triton_dir = os.path.dirname(os.path.abspath(triton.__file__))
    return path.startswith((triton_dir, _HERE, os.path.dirname(np.__file__)))
