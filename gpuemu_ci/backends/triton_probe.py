"""What a case did inside Triton's CPU interpreter (TRITON_INTERPRET=1): whether it launched a kernel there, and
which low-precision float types the interpreter handled while it did.

The plain interpreter keeps bfloat16 and the fp8 types as raw integer bit patterns and computes on those:
`tl.dot` multiplies the bits (results around 1e10), `+`, `*`, comparisons and `tl.sum` are integer arithmetic
on them, an fp32 -> bf16 store truncates instead of rounding to nearest, and bf16 subnormals become zero
(tests/backends/test_triton_interpreter_faults.py measures it; upstream calls bf16 unsupported in the
interpreter). Under the GPU-faithful layer (gpuemu_ci/triton_cpu) these types are real numbers, except
fp8e4b15 (`UNMODELLED`); a case run in the plain interpreter (`[ops.triton] sanitize = false`) that touched
any of them, or one that touched fp8e4b15, is not judged: its numbers are the interpreter's fault, not the
kernel's. Every tensor the interpreter makes (loads, casts, constants, pointers) passes through
`TensorHandle`, so watching it catches an fp32 kernel's internal bf16 round trip too.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from typing import Any

from gpuemu_ci.calls import LaunchedKernel

# Triton's names of the types the interpreter stores as bit patterns, and ours.
FAULTY_TYPES = {
    "bf16": "bfloat16",
    "fp8e5": "float8_e5m2",
    "fp8e5b16": "float8_e5m2fnuz",
    "fp8e4nv": "float8_e4m3fn",
    "fp8e4b8": "float8_e4m3fnuz",
    "fp8e4b15": "fp8e4b15",  # Triton's fp8 with exponent bias 15 (pre-Hopper): no NumPy type holds it
}
UNMODELLED = frozenset({"fp8e4b15"})  # what the layer does not compute as the GPU does (triton_cpu/lowp.py)
INTERPRETER = "triton-interpreter"

_state: dict[str, Any] = {"launches": 0, "types": set(), "kernels": set()}


def _seen(jit_function: Any) -> None:
    """Note the Python function behind a launched or called `@triton.jit` function (mutate's census)."""
    fn: Any = getattr(jit_function, "fn", None)
    code = getattr(fn, "__code__", None)
    if code is not None:
        _state["kernels"].add(
            (getattr(fn, "__module__", "") or "", fn.__name__, code.co_filename, code.co_firstlineno)
        )


def _census_compiled() -> None:
    """Note the kernels compiled Triton launches too (on a GPU the interpreter is not used)."""
    jit = sys.modules.get("triton.runtime.jit")
    function = getattr(jit, "JITFunction", None)
    run = getattr(function, "run", None)
    if function is None or run is None or getattr(jit, "_gpuemu_census", False):
        return

    def noted_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        _seen(self)
        return run(self, *args, **kwargs)

    function.run = noted_run
    setattr(jit, "_gpuemu_census", True)  # noqa: B010  # a marker on a third-party module


def install() -> None:
    """Count interpreted launches and record faulty types, once Triton's interpreter module is imported."""
    _census_compiled()
    module = sys.modules.get("triton.runtime.interpreter")
    if module is None or getattr(module, "_gpuemu_probed", False):
        return
    from gpuemu_ci.triton_cpu import layer

    layer.on_import(module)  # the interpreter's `and`/`or` fixed before any kernel is rewritten
    function = getattr(module, "InterpretedFunction", None)
    handle = getattr(module, "TensorHandle", None)
    run = getattr(function, "run", None)
    if function is None or run is None:
        return

    def counted_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("warmup"):  # a warm-up returns without launching
            _state["launches"] += 1
        _seen(self)
        return run(self, *args, **kwargs)

    function.run = counted_run
    _state["counter"] = (function, counted_run)
    device_call = function.__dict__.get("__call__")  # the class's own: a kernel called as a device function
    if device_call is not None:

        def noted_call(self: Any, *args: Any, **kwargs: Any) -> Any:
            _seen(self)  # a @triton.jit helper called from a kernel
            return device_call(self, *args, **kwargs)

        function.__call__ = noted_call
    post_init = getattr(handle, "__post_init__", None)
    if handle is not None and post_init is not None:

        def watched(self: Any) -> None:
            post_init(self)
            dtype = self.dtype
            while hasattr(dtype, "element_ty"):  # pointers and blocks: their element type
                dtype = dtype.element_ty
            name = getattr(dtype, "name", None)
            if name in FAULTY_TYPES:
                _state["types"].add(FAULTY_TYPES[name])

        handle.__post_init__ = watched
    setattr(module, "_gpuemu_probed", True)  # noqa: B010  # a marker on a third-party module


class _InstallOnImport(importlib.abc.MetaPathFinder):
    """Installs the probe the moment user code imports Triton's interpreter, so that the first case is watched
    like every other."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != "triton.runtime.interpreter":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        original = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            install()

        setattr(spec.loader, "exec_module", exec_module)  # noqa: B010  # this spec's own loader instance
        return spec


def watch_imports() -> None:
    """Call once at worker start: the probe goes in when (and only if) user code imports Triton."""
    if not any(isinstance(f, _InstallOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _InstallOnImport())
    install()


def launches() -> int:
    """Launches the interpreter has run in this process (InterpretedFunction.run, warm-ups not counted)."""
    return int(_state["launches"])


def counting() -> bool:
    """Whether the launch counter is in place (False before Triton's interpreter is imported, or if the op
    took it away)."""
    counter = _state.get("counter")
    return counter is None or vars(counter[0]).get("run") is counter[1]


def mark() -> int:
    """Start of a case: forget the types seen so far; returns the launch count (pass it to `since`)."""
    install()
    _state["types"] = set()
    _state["kernels"] = set()
    return int(_state["launches"])


def kernels() -> tuple[LaunchedKernel, ...]:
    """The `@triton.jit` functions launched or called since `mark()`, in a stable order."""
    return tuple(LaunchedKernel(*seen) for seen in sorted(_state["kernels"]))


def since(launches_before: int) -> tuple[str | None, tuple[str, ...]]:
    """(INTERPRETER or None, the faulty types the interpreter handled) during the case started at `mark()`."""
    install()
    launched = _state["launches"] > launches_before
    return (INTERPRETER if launched else None), (tuple(sorted(_state["types"])) if launched else ())
