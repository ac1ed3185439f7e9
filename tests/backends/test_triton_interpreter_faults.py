"""Triton's interpreter faults, measured with real kernels against torch on the CPU, and the same probes under
gpuemu-ci's layer (gpuemu_ci/triton_cpu), which must get every one right. In the plain interpreter fp32 and
fp16 are exact in every probe and bfloat16 is wrong in each (why `sanitize = false` leaves bf16 cases
unjudged: backends.triton_probe); under the layer bfloat16 and fp8 are computed as the GPU computes them.

If a Triton release fixes one of the interpreter's faults, its test here fails: the layer's replacement of
that part can then go.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.triton_cpu.support_interpreter import checkout_env

pytest.importorskip("torch")
pytest.importorskip("triton")

PROBES = textwrap.dedent("""
    import json
    import os
    from gpuemu_ci.backends import triton_probe
    triton_probe.watch_imports()
    import torch
    import triton
    import triton.language as tl
    from gpuemu_ci.triton_cpu.layer import CallSettings, intercepted

    DT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    TL = {"float32": tl.float32, "float16": tl.float16, "bfloat16": tl.bfloat16}

    @triton.jit
    def dot(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
        r = tl.arange(0, N)
        a = tl.load(a_ptr + r[:, None] * N + r[None, :])
        b = tl.load(b_ptr + r[:, None] * N + r[None, :])
        tl.store(c_ptr + r[:, None] * N + r[None, :], tl.dot(a, b))

    @triton.jit
    def store(x_ptr, y_ptr, n, BLOCK: tl.constexpr):  # fp32 in, stored in y's dtype
        r = tl.arange(0, BLOCK)
        tl.store(y_ptr + r, tl.load(x_ptr + r, mask=r < n), mask=r < n)

    @triton.jit
    def upcast(x_ptr, y_ptr, n, BLOCK: tl.constexpr):  # x's dtype in, fp32 out
        r = tl.arange(0, BLOCK)
        tl.store(y_ptr + r, tl.load(x_ptr + r, mask=r < n).to(tl.float32), mask=r < n)

    @triton.jit
    def binary(a_ptr, b_ptr, add_ptr, mul_ptr, lt_ptr, n, BLOCK: tl.constexpr):
        r = tl.arange(0, BLOCK)
        a = tl.load(a_ptr + r, mask=r < n)
        b = tl.load(b_ptr + r, mask=r < n)
        tl.store(add_ptr + r, a + b, mask=r < n)
        tl.store(mul_ptr + r, a * b, mask=r < n)
        tl.store(lt_ptr + r, (a < b).to(tl.int32), mask=r < n)

    @triton.jit
    def reduce(x_ptr, out_ptr, BLOCK: tl.constexpr):
        x = tl.load(x_ptr + tl.arange(0, BLOCK))
        tl.store(out_ptr, tl.sum(x, axis=0))
        tl.store(out_ptr + 1, tl.max(x, axis=0))

    @triton.jit
    def to_fp8(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        r = tl.arange(0, BLOCK)
        tl.store(y_ptr + r, tl.load(x_ptr + r, mask=r < n).to(y_ptr.dtype.element_ty), mask=r < n)

    @triton.jit
    def fp8_dot(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
        r = tl.arange(0, N)
        a = tl.load(a_ptr + r[:, None] * N + r[None, :])
        b = tl.load(b_ptr + r[:, None] * N + r[None, :])
        tl.store(c_ptr + r[:, None] * N + r[None, :], tl.dot(a, b))

    @triton.jit
    def bf16_atomic(p_ptr, v_ptr, n, BLOCK: tl.constexpr):
        r = tl.arange(0, BLOCK)
        tl.atomic_add(p_ptr + r % 2, tl.load(v_ptr + r, mask=r < n), mask=r < n)

    if os.environ.get("UNDER_LAYER"):
        _layer = intercepted(CallSettings(1))  # kept: a dropped context manager would leave at once
        _layer.__enter__()
    results = {}
    fp8 = {}
    values = torch.tensor([1.0, 3.3, -17.5, 448.0, 500.0, -1e6, float("inf"), 2.0**-9, 0.0, 0.07])
    for tname, dtype, limit in (("e4m3", torch.float8_e4m3fn, 448.0), ("e5m2", torch.float8_e5m2, 57344.0)):
        y = torch.empty(len(values), dtype=dtype)
        try:
            to_fp8[(1,)](values, y, len(values), BLOCK=16)
            want = values.clamp(-limit, limit).to(dtype)
            fp8[f"{tname} store: wrong values"] = int((y.view(torch.uint8) != want.view(torch.uint8)).sum())
        except Exception as exc:
            fp8[f"{tname} store: wrong values"] = -1
        a = torch.randint(-3, 4, (16, 16)).to(dtype)
        b = torch.randint(-3, 4, (16, 16)).to(dtype)
        c = torch.empty((16, 16), dtype=torch.float32)
        try:
            fp8_dot[(1,)](a, b, c, N=16)
            fp8[f"{tname} dot: max error"] = float((c - a.float() @ b.float()).abs().max())
        except Exception as exc:
            fp8[f"{tname} dot: max error"] = -1.0
    p = torch.zeros(2, dtype=torch.bfloat16)
    v = torch.tensor([0.5, 1.25, -0.75, 2.0, 8.0], dtype=torch.bfloat16)
    try:
        bf16_atomic[(1,)](p, v, 5, BLOCK=8)
        want = torch.tensor([0.5 - 0.75 + 8.0, 1.25 + 2.0], dtype=torch.bfloat16)
        fp8["bf16 atomic_add: wrong values"] = int((p != want).sum())
    except Exception as exc:
        fp8["bf16 atomic_add: wrong values"] = -1
    results["fp8"] = fp8
    for name, dtype in DT.items():
        row = {}
        a = torch.randint(-2, 3, (16, 16)).to(dtype)
        b = torch.randint(-2, 3, (16, 16)).to(dtype)
        c = torch.empty((16, 16), dtype=torch.float32)
        dot[(1,)](a, b, c, N=16)
        row["dot: max error"] = float((c - a.float() @ b.float()).abs().max())
        if name != "float32":
            values = torch.tensor([1.01171875, 1.00390721, 3.14, 1.998046875, 65504.0, 2.0**-130, 2.0**-149, -1e-39])
            y = torch.empty(len(values), dtype=dtype)
            store[(1,)](values, y, len(values), BLOCK=8)
            want = values.to(dtype)
            row["fp32 store: wrong values"] = int((y.view(torch.int16) != want.view(torch.int16)).sum())
            bits = torch.tensor([0x0001, 0x0040, 0x8001 - 0x10000, 0x3F81], dtype=torch.int16).view(dtype)
            up = torch.empty(4, dtype=torch.float32)
            upcast[(1,)](bits, up, 4, BLOCK=4)
            row["subnormal upcast: wrong values"] = int((up != bits.float()).sum())
        x = torch.tensor([2.5, 3.0, -5.0, 3.0, 0.5, -1.0, 7.0, -0.25], dtype=dtype)
        y = torch.tensor([2.0, -7.0, -2.0, -7.0, 0.5, 4.0, -0.5, -0.25], dtype=dtype)
        add, mul = torch.empty(8, dtype=dtype), torch.empty(8, dtype=dtype)
        lt = torch.empty(8, dtype=torch.int32)
        binary[(1,)](x, y, add, mul, lt, 8, BLOCK=8)
        row["add: wrong values"] = int((add.float() != (x + y).float()).sum())
        row["mul: wrong values"] = int((mul.float() != (x * y).float()).sum())
        row["compare: wrong values"] = int((lt != (x < y).to(torch.int32)).sum())
        out = torch.empty(2, dtype=dtype)
        reduce[(1,)](x, out, BLOCK=8)
        row["sum: error"] = abs(float(out[0]) - float(x.float().sum()))
        row["max with negatives: wrong"] = int(float(out[1]) != float(x.max()))
        results[name] = row
    print(json.dumps(results))
""")


def _measure(**env: str) -> dict[str, dict[str, float]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBES], capture_output=True, text=True, env=checkout_env(TRITON_INTERPRET="1", **env),
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    results: dict[str, dict[str, float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return results


@pytest.fixture(scope="module")
def measured() -> dict[str, dict[str, float]]:
    return _measure()


@pytest.fixture(scope="module")
def layered() -> dict[str, dict[str, float]]:
    return _measure(UNDER_LAYER="1")


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_fp32_and_fp16_are_exact_in_every_probe(measured: dict[str, dict[str, float]], dtype: str) -> None:
    assert all(value == 0 for value in measured[dtype].values()), measured[dtype]


@pytest.mark.slow
@pytest.mark.parametrize(
    "probe",
    [
        "dot: max error",  # the bit patterns are multiplied: around 1e10
        "fp32 store: wrong values",  # truncated instead of rounded to nearest even, subnormals flushed
        "subnormal upcast: wrong values",  # bf16 subnormals read back as zero
        "add: wrong values",
        "mul: wrong values",
        "compare: wrong values",  # integer order of the bits is not the order of the values
        "sum: error",
    ],
)
def test_bfloat16_is_wrong_in_the_interpreter(measured: dict[str, dict[str, float]], probe: str) -> None:
    assert measured["bfloat16"][probe] > 0, measured["bfloat16"]
    assert measured["bfloat16"]["dot: max error"] > 1e6


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "fp8"])
def test_under_the_layer_every_probe_is_exact(layered: dict[str, dict[str, float]], dtype: str) -> None:
    """bf16 add, mul, compare, sum, max, dot, the rounded store and subnormals; fp8 saturating stores and dots;
    a bf16 atomic_add (the interpreter raises on it): all as the GPU computes them."""
    assert layered[dtype] and all(value == 0 for value in layered[dtype].values()), layered[dtype]


@pytest.mark.slow
def test_the_plain_interpreter_gets_the_fp8_and_bf16_atomic_probes_wrong(
    measured: dict[str, dict[str, float]],
) -> None:
    assert any(value != 0 for value in measured["fp8"].values()), measured["fp8"]
