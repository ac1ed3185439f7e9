"""The float64 shadow run of a Triton kernel (triton_cpu/shadow.py, shadow_ops.py): real kernels in Triton's real
interpreter under the layer with `CallSettings(shadow64=True)`, the first line where each parted from float64."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

from tests.triton_cpu.support_interpreter import run_interpreted

SCRIPT = textwrap.dedent("""
    import json
    import torch
    import triton
    import triton.language as tl
    from gpuemu_ci.triton_cpu.layer import CallSettings, intercepted

    @triton.jit
    def one_pass(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / N
        mean_sq = tl.sum(x * x, axis=0) / N
        var = mean_sq - mean * mean  # ONE PASS
        rstd = 1.0 / tl.sqrt(var + 1e-6)
        tl.store(y_ptr + row * N + cols, ((x - mean) * rstd).to(y_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def two_pass(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / N
        d = tl.where(mask, x - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / N + 1e-6)
        tl.store(y_ptr + row * N + cols, (d * rstd).to(y_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def wrong_index(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_ptr + row * N + (cols + 1) % N, mask=mask, other=0.0)  # a neighbour's element
        tl.store(y_ptr + row * N + cols, x * 3.0 - 1.0, mask=mask)

    @triton.jit
    def logsumexp_max_at_zero(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=float("-inf"))  # LOAD LINE
        m = 0.0  # the running max should start at -inf
        m = tl.maximum(m, tl.max(x, axis=0))  # MAX LINE: keeps the 0
        e = tl.exp(x - m)  # EXP LINE
        tl.store(y_ptr + row, tl.log(tl.sum(e, axis=0)) + m)

    same_outputs = []

    @triton.jit
    def matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
            b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
            acc += tl.dot(a, b)  # TF32 inputs, as on the GPU
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)

    @triton.jit
    def softmax_unshifted(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_ptr + row * N + cols, mask=mask, other=float("-inf"))  # SOFTMAX LOAD
        e = tl.exp(x)  # OVERFLOW LINE: no max subtracted
        tl.store(y_ptr + row * N + cols, e / tl.sum(e, axis=0), mask=mask)

    def shadowed(kernel, x, y, N, BLOCK, shadow=True):
        with intercepted(CallSettings(seed=3, shadow64=shadow)) as call:
            kernel[(x.shape[0],)](x, y, N, BLOCK=BLOCK)
        report = call.report()
        plain = torch.empty_like(y)
        with intercepted(CallSettings(seed=3)):  # vectorised, as a gate's call runs
            kernel[(x.shape[0],)](x, plain, N, BLOCK=BLOCK)
        same_outputs.append(bool(torch.equal(plain.view(torch.uint8), y.view(torch.uint8))))
        return {
            "shadowed": report.shadowed,
            "findings": [[f.site, f.source, f.kind, f.factor, list(f.program), f.describe()] for f in report.shadow],
        }

    torch.manual_seed(0)
    found = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
        x = (1000.0 + torch.randn(6, 1000)).to(dtype)  # rows with a large mean
        for kernel in (one_pass, two_pass):
            found[f"{kernel.fn.__name__} {name}"] = shadowed(kernel, x, torch.empty_like(x), 1000, 1024)
    x = torch.randn(6, 1000)
    found["wrong_index"] = shadowed(wrong_index, x, torch.empty_like(x), 1000, 1024)
    x = -150.0 - 10 * torch.rand(4, 100)  # every exp(x) below fp32's range
    y = torch.empty(4)
    found["logsumexp"] = shadowed(logsumexp_max_at_zero, x, y, 100, 128)
    found["logsumexp output"] = str(float(y[0]))
    found["no shadow"] = shadowed(one_pass, (1000.0 + torch.randn(6, 1000)), torch.empty(6, 1000), 1000, 1024, False)
    x = 95.0 + torch.rand(3, 50)  # exp(x) over fp32's largest value, finite in float64
    found["softmax"] = shadowed(softmax_unshifted, x, torch.empty_like(x), 50, 64)
    a, b, c = torch.randn(64, 96), torch.randn(96, 64), torch.empty(64, 64)
    with intercepted(CallSettings(seed=3, shadow64=True)) as call:
        matmul[(2, 2)](a, b, c, 64, 64, 96, BM=32, BN=32, BK=32)
    found["matmul"] = [call.report().shadowed, len(call.report().shadow)]
    # A call that names the programs to follow (an explain re-run's shadow, backends/explain_shadow.py): they run
    # alone, in the order named, until one has a finding; the others run at once.
    x = 1000.0 + torch.randn(100, 1000)
    x[3] -= 1000.0  # a centred row: its one-pass variance does not cancel, its program has no finding
    whole, named = torch.empty_like(x), torch.empty_like(x)
    with intercepted(CallSettings(seed=3, shadow64=True)) as call:
        one_pass[(100,)](x, whole, 1000, BLOCK=1024)
    everyone = call.report()
    names = (("one_pass", 3), ("one_pass", 7), ("one_pass", 9))
    with intercepted(CallSettings(seed=3, shadow64=True, shadow_programs=names)) as call:
        one_pass[(100,)](x, named, 1000, BLOCK=1024)
    chosen = call.report()
    found["named"] = {
        "shadowed": [everyone.shadowed, chosen.shadowed],
        "vectorised": [everyone.vectorised, chosen.vectorised],
        "of 7": [[f.describe() for f in r.shadow if f.pid == 7] for r in (everyone, chosen)],
        "of 3": [f.describe() for f in everyone.shadow if f.pid == 3],
        "programs": sorted({f.pid for f in chosen.shadow}),
        "same outputs": bool(torch.equal(whole, named)),
    }
    found["same outputs"] = same_outputs
    print(json.dumps(found))
""")


def _line(marker: str) -> int:
    return next(i for i, text in enumerate(SCRIPT.splitlines(), 1) if marker in text)


@pytest.mark.slow  # a fresh interpreter with Triton (about 10 s)
def test_the_shadow_names_the_first_line_that_parts_from_float64_and_nothing_else(tmp_path: Path) -> None:
    found = run_interpreted(SCRIPT, tmp_path)
    # One-pass variance on rows of mean 1000: E[x^2] - E[x]^2 cancels the rounding of both sums; named at the
    # subtraction in every program, in fp32 and in the 16-bit types (the shadow is float64 whatever the input).
    for dtype in ("fp32", "bf16", "fp16"):
        seen = found[f"one_pass {dtype}"]
        assert seen["shadowed"] == 6, dtype
        # Every fp32 row parts beyond rounding; a bf16 output rounds away all but the rows that part most.
        assert len(seen["findings"]) == 6 if dtype == "fp32" else 1 <= len(seen["findings"]) <= 6, dtype
        for site, source, kind, factor, _program, line in seen["findings"]:
            assert site == f"kernels.py:{_line('# ONE PASS')} (in one_pass)", dtype
            assert source == "var = mean_sq - mean * mean  # ONE PASS"
            assert kind == "parted" and factor > 1e3, (dtype, factor)
            assert line.startswith(f"first parted from float64 at {site} `var = mean_sq - mean * mean")
        # The correct two-pass kernel on the same rows agrees with its shadow within rounding: nothing is said.
        assert found[f"two_pass {dtype}"] == {"shadowed": 6, "findings": []}, dtype
    # A wrong index is the same wrong code in float64: nothing is said.
    assert found["wrong_index"] == {"shadowed": 6, "findings": []}
    # exp(x - 0) of rows far below 0 underflows to 0 in fp32 (the log gives -inf) where float64 keeps it.
    assert found["logsumexp output"] == "-inf"
    seen = found["logsumexp"]["findings"]
    assert len(seen) == 4
    for site, source, kind, _factor, _program, line in seen:
        assert site == f"kernels.py:{_line('# EXP LINE')} (in logsumexp_max_at_zero)"
        assert kind == "underflow" and source.startswith("e = tl.exp(x - m)")
        assert "underflowed to 0 where float64 gives" in line
        # Why so small: the exp's operand came from the load and from the max that kept the 0, and is said so.
        load, kept = _line("# LOAD LINE"), _line("# MAX LINE")
        assert line.endswith(
            f"; its operands came from the values made at kernels.py:{load} (in logsumexp_max_at_zero) "
            f'`x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=float("-inf"))  # LOAD LINE` and at '
            f"kernels.py:{kept} (in logsumexp_max_at_zero) `m = tl.maximum(m, tl.max(x, axis=0))  # MAX LINE: "
            "keeps the 0`"
        ), line
    assert found["no shadow"] == {"shadowed": 0, "findings": []}  # only when asked for
    # A correct TF32 matmul: the dots' input rounding is their own (allowed), nothing parted beyond it.
    assert found["matmul"] == [4, 0]
    # The shadow changes no output: bit for bit those of the call a gate makes.
    # exp of finite values gave inf where float64 stays finite (the row then stores NaN): named at the exp.
    seen = found["softmax"]["findings"]
    assert len(seen) == 3
    for site, _source, kind, _factor, _program, line in seen:
        assert (site, kind) == (f"kernels.py:{_line('# OVERFLOW LINE')} (in softmax_unshifted)", "non_finite")
        assert "finite operands gave inf where float64 gives" in line
        assert line.endswith(
            f"its operands came from the values made at kernels.py:{_line('# SOFTMAX LOAD')} (in softmax_unshifted) "
            f'`x = tl.load(x_ptr + row * N + cols, mask=mask, other=float("-inf"))  # SOFTMAX LOAD`'
        ), line
    assert found["same outputs"] == [True] * 10
    # Named programs: 3 (no finding) and 7 (its finding) run alone with the shadow, 9 is not needed, and the
    # other 97 run at once; program 7's finding is word for word the one the shadow of every program gives, and
    # the outputs are the same bytes.
    named = found["named"]
    assert named["shadowed"] == [100, 2] and named["vectorised"] == [0, 1]
    assert named["of 3"] == [] and named["programs"] == [7]
    assert named["of 7"][0] == named["of 7"][1] and len(named["of 7"][1]) == 1
    assert named["same outputs"]
