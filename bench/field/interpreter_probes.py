"""One-element probes of Triton's CPU interpreter (TRITON_INTERPRET=1): what it does to the operations the
Liger kernels in this harness use, per dtype, against torch on the same values (FINDINGS.md cites the output).

    python bench/field/interpreter_probes.py

Each probe launches a one-program kernel on a 1-element (or 8-element) tensor and prints the interpreter's
result next to torch's. Probes: fp32 -> X stores (rounding), upcast of an X load, X + X, X * X, X < X on
negatives, tl.sum over 8 values, a Python-float kernel argument (`eps.to(...)`), and a libdevice function
(rsqrt). (tl.exp / tl.sigmoid reject 16-bit operands in compiled Triton too: a language rule, not probed.)
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@triton.jit
def _store_f32_as(x_ptr, y_ptr):
    tl.store(y_ptr, tl.load(x_ptr))  # x fp32, y of the probed dtype: the implicit store conversion


@triton.jit
def _upcast(x_ptr, y_ptr):
    tl.store(y_ptr, tl.load(x_ptr).to(tl.float32))


@triton.jit
def _add(a_ptr, b_ptr, y_ptr):
    tl.store(y_ptr, tl.load(a_ptr) + tl.load(b_ptr))


@triton.jit
def _mul(a_ptr, b_ptr, y_ptr):
    tl.store(y_ptr, tl.load(a_ptr) * tl.load(b_ptr))


@triton.jit
def _less(a_ptr, b_ptr, y_ptr):
    tl.store(y_ptr, (tl.load(a_ptr) < tl.load(b_ptr)).to(tl.int32))


@triton.jit
def _sum8(x_ptr, y_ptr):
    tl.store(y_ptr, tl.sum(tl.load(x_ptr + tl.arange(0, 8)), axis=0))


@triton.jit
def _float_arg(y_ptr, eps):
    tl.store(y_ptr, eps.to(tl.float32))


@triton.jit
def _rsqrt(x_ptr, y_ptr):
    tl.store(y_ptr, libdevice.rsqrt(tl.load(x_ptr)))


def _run(kernel: object, *args: object) -> str:
    try:
        kernel[(1,)](*args)  # type: ignore[index]
    except Exception as exc:  # the interpreter raises InterpreterError wrapping the kernel's exception
        return f"raises {type(exc).__name__}: {str(exc).splitlines()[0][:90]}"
    return ""


def _fmt(t: torch.Tensor) -> str:
    values = t.float().tolist()
    return ", ".join(f"{v:.9g}" for v in (values if isinstance(values, list) else [values]))


def probe(dtype: torch.dtype) -> list[str]:
    name = str(dtype).replace("torch.", "")
    lines = []
    x = torch.tensor([1.01171875], dtype=torch.float32)  # between two bf16 values, nearer the upper one
    y = torch.empty(1, dtype=dtype)
    err = _run(_store_f32_as, x, y)
    lines.append(f"{name:<9} store fp32 1.01171875 -> {err or _fmt(y)} (torch: {_fmt(x.to(dtype))})")
    tiny = torch.tensor([2.0**-130], dtype=torch.float32).to(dtype)
    out = torch.empty(1, dtype=torch.float32)
    err = _run(_upcast, tiny, out)
    lines.append(f"{name:<9} upcast {_fmt(tiny)} -> {err or _fmt(out)} (torch: {_fmt(tiny.float())})")
    for label, kernel, a, b, expected in (
        ("2.5 + 2.0", _add, 2.5, 2.0, 4.5),
        ("2.5 * 2.0", _mul, 2.5, 2.0, 5.0),
        ("-5 < -2", _less, -5.0, -2.0, 1.0),
    ):
        ta, tb = torch.tensor([a], dtype=dtype), torch.tensor([b], dtype=dtype)
        res = torch.empty(1, dtype=torch.int32 if kernel is _less else dtype)
        err = _run(kernel, ta, tb, res)
        lines.append(f"{name:<9} {label} -> {err or _fmt(res)} (expected {expected:g})")
    eight = torch.tensor([0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 5.5], dtype=dtype)
    res = torch.empty(1, dtype=dtype)
    err = _run(_sum8, eight, res)
    lines.append(f"{name:<9} tl.sum of 8 values (19.5) -> {err or _fmt(res)}")
    return lines


def main() -> None:
    print(f"triton {triton.__version__}, torch {torch.__version__}, TRITON_INTERPRET=1")
    for dtype in DTYPES:
        for line in probe(dtype):
            print(line)
    out = torch.empty(1, dtype=torch.float32)
    print(f"float kernel argument eps=1e-6, eps.to(tl.float32) -> {_run(_float_arg, out, 1e-6) or _fmt(out)}")
    out = torch.empty(1, dtype=torch.float32)
    err = _run(_rsqrt, torch.tensor([4.0]), out)
    print(f"libdevice.rsqrt(4.0) -> {err or _fmt(out)}")


if __name__ == "__main__":
    main()
