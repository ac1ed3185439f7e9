"""References written two ways: as the config's author wrote them, and upcast to float64 on entry.

The most common way to write a reference is to compute in float64 whatever it is given (`x.astype(np.float64)`,
`x.double()`), and upstream's guides tell users to write it so. gpuemu-ci's verdicts must not depend on it
(issue #44): the benches score a config both ways. `upcast_config(config)` writes a copy of a gpuemu.toml next
to it (so every relative target still resolves) whose references are the same functions, each wrapped so that
every float input it receives (NumPy arrays of any float dtype, torch tensors) is cast to float64 before the
call; `environment()` is what the subprocess needs to import the wrapper.

In a config the wrapped reference reads `reference = "reference_styles:upcast.<module>.<function>"`: this
module's `upcast` object resolves the dotted path lazily, importing the module from the config's directory (the
gate puts it on sys.path), and returns the function wrapped (functools.wraps keeps its signature, which the gate
checks against the op's inputs).
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
STYLES = ("as-written", "upcast")
# `reference = "pkg.mod:function"` on a line of its own (the configs' form); script references stay as written.
_REFERENCE_LINE = re.compile(r'^(reference\s*=\s*)"([A-Za-z_][\w.]*):([A-Za-z_][\w.]*)"', re.MULTILINE)


def _to_float64(value: Any) -> Any:
    """A float array or tensor as float64 (a torch tensor keeps its autograd graph); anything else as is."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "f" or value.dtype.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
            return value.astype(np.float64)
        return value
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.double()
    if isinstance(value, dict):  # an upstream-style `reference(inputs: dict, **kwargs)`
        return {k: _to_float64(v) for k, v in value.items()}
    return value


def upcasting(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` called with every float input cast to float64 first."""

    @functools.wraps(function)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        return function(*(_to_float64(a) for a in args), **{k: _to_float64(v) for k, v in kwargs.items()})

    return wrapped


class _Path:
    """`upcast.pkg.mod.function`: attribute access walks modules (importing them as needed) and returns the
    function at the end of the path wrapped by `upcasting`."""

    def __init__(self, owner: Any = None, name: str = "") -> None:
        self._owner = owner
        self._name = name

    def __getattr__(self, part: str) -> Any:
        if part.startswith("__"):
            raise AttributeError(part)
        dotted = f"{self._name}.{part}" if self._name else part
        if self._owner is None:
            found: Any = importlib.import_module(dotted)
        else:
            found = getattr(self._owner, part, None)
            if found is None:
                found = importlib.import_module(dotted)
        if callable(found) and not isinstance(found, type(sys)):
            return upcasting(found)
        return _Path(found, dotted)


upcast = _Path()


def rewrite(text: str) -> tuple[str, int]:
    """The config's text with every callable reference wrapped; and how many it wrapped."""
    return _REFERENCE_LINE.subn(
        lambda m: f'{m.group(1)}"reference_styles:upcast.{m.group(2)}.{m.group(3)}"', text
    )


def upcast_config(config: Path) -> Path:
    """A copy of `config` beside it (same directory: relative targets resolve) with its references upcast.
    The caller removes it (`remove_config`)."""
    text, count = rewrite(config.read_text())
    if not count:
        raise ValueError(f'{config}: no `reference = "pkg.mod:function"` line to wrap')
    path = config.with_name(f".{config.stem}.upcast-{os.getpid()}.toml")
    path.write_text(text)
    return path


def config_for(style: str, config: Path) -> Path:
    """The config to run for a reference style (the config itself for `as-written`)."""
    if style not in STYLES:
        raise ValueError(f"unknown reference style {style!r} (known: {', '.join(STYLES)})")
    return config if style == "as-written" else upcast_config(config)


def remove_config(style: str, path: Path) -> None:
    if style != "as-written":
        path.unlink(missing_ok=True)


def environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) with this directory on PYTHONPATH, so workers import
    this module."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
    return env
