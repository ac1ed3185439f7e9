"""What it takes to run Liger's Triton kernels under Triton's CPU interpreter (TRITON_INTERPRET=1, triton 3.9).

Out of the box most Liger forward kernels do not run there at all (measured in FINDINGS.md):
- a Python float kernel argument stays a Python float (the interpreter's `_implicit_cvt` converts only ints,
  bools, tensors and tuples), so `eps.to(tl.float32)` raises AttributeError; compiled Triton passes it as an
  fp32 scalar (triton-viz PR #310 hit the same);
- functions imported from `triton.language.extra.libdevice` (rsqrt, tanh) are the empty stubs of the
  generic module and return None (triton#8825; the fix PR triton#10366 was closed unmerged).

`install()` patches both, only under the interpreter, the way a user who wants these kernels in a CPU CI job
would have to: float arguments become fp32 scalars (what the GPU launcher passes) and rsqrt/tanh are computed
in the operand's dtype with NumPy (fp32 for every Liger call site), like the interpreter's own math functions
(rsqrt through the interpreter's builder, which computes it so).
It must run before `liger_kernel.ops` is imported, because Liger binds `rsqrt`/`tanh` at import time.
Nothing here touches the interpreter's bf16 handling (it holds bf16 as uint16 bit patterns): that stays as
shipped, on purpose.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

_INSTALLED = [False]


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def install() -> None:
    """Idempotent; a no-op unless TRITON_INTERPRET=1."""
    if _INSTALLED[0] or not interpreting():
        return
    import triton.language as tl
    import triton.language.extra.libdevice as libdevice
    from triton.runtime import interpreter

    original = interpreter._implicit_cvt

    def implicit_cvt(arg: Any) -> Any:
        if isinstance(arg, float):  # not bool/int: those are handled (and bool is an int)
            handle = interpreter.TensorHandle(np.array([arg], dtype=np.float32), tl.float32)
            return tl.tensor(handle, tl.float32)
        return original(arg)

    interpreter._implicit_cvt = implicit_cvt

    def unary(numpy_fn: Callable[[np.ndarray], np.ndarray]) -> Callable[..., Any]:
        def fn(arg0: Any, _semantic: Any = None) -> Any:
            data = arg0.handle.data
            result = numpy_fn(data).astype(data.dtype, copy=False)
            return tl.tensor(interpreter.TensorHandle(result, arg0.handle.dtype.scalar), arg0.type)

        return fn

    def rsqrt(arg0: Any, _semantic: Any = None) -> Any:
        # Through the interpreter's own builder method (1 / np.sqrt in the operand's dtype, as `unary` would
        # compute it), so that what wraps the builder sees it: gpuemu-ci's float64 shadow run follows it.
        return tl.tensor(interpreter.interpreter_builder.create_rsqrt(arg0.handle), arg0.type)

    libdevice.rsqrt = rsqrt  # type: ignore[attr-defined]
    libdevice.tanh = unary(np.tanh)  # type: ignore[attr-defined]
    _INSTALLED[0] = True
