"""Triton kernels on a machine without a GPU (issue #15, item 6; issue #43): they run in Triton's CPU interpreter
under gpuemu-ci's layer, which computes bfloat16 as the GPU does (the interpreter alone computes it on bit
patterns: backends.triton_probe). bfloat16 cases are judged like fp32 and fp16 ones, a bf16 intermediate of an
fp32 kernel included, and a real bug is caught in every dtype. With `[ops.triton] sanitize = false` the plain
interpreter runs: its bfloat16 cases are not judged, and never pass (an error of the op: exit 3 when nothing
fails). Every output says which ops ran in the interpreter.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support_cli import run_cli

pytest.importorskip("torch")
pytest.importorskip("triton")

REASON = "Triton's interpreter computes bfloat16 on bit patterns"

KERNELS = """
import torch
import triton
import triton.language as tl


@triton.jit
def _scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, (x * 2.0).to(out_ptr.dtype.element_ty), mask=mask)


def scale(x):
    out = torch.empty_like(x)
    n = x.numel()
    _scale[(triton.cdiv(n, 64),)](x.contiguous(), out, n, BLOCK=64)
    return out


@triton.jit
def _softmax(out_ptr, x_ptr, x_row_stride, x_col_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols * x_col_stride, mask=mask, other=-float("inf"))
    x = x.to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n_cols + cols, (e / tl.sum(e, axis=0)).to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x):
    rows, cols = x.shape
    out = torch.empty((rows, cols), dtype=x.dtype)
    _softmax[(rows,)](out, x, x.stride(0), x.stride(1), cols, BLOCK=triton.next_power_of_2(cols))
    return out


@triton.jit
def _matmul(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, BM: tl.constexpr, BN: tl.constexpr,
            BK: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * sam + rk[None, :] * sak, mask=(rm[:, None] < M) & (rk[None, :] < K),
                    other=0.0)
        b = tl.load(b_ptr + rk[:, None] * sbk + rn[None, :] * sbn, mask=(rk[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype)
    grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))
    _matmul[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), BM=16, BN=16, BK=16)
    return c


@triton.jit
def _scale_via_bf16(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.bfloat16)  # a bf16 intermediate in an fp32 kernel
    tl.store(out_ptr + offsets, (x.to(tl.float32) * 2.0).to(out_ptr.dtype.element_ty), mask=mask)


def scale_via_bf16(x):
    out = torch.empty_like(x)
    n = x.numel()
    _scale_via_bf16[(triton.cdiv(n, 64),)](x.contiguous(), out, n, BLOCK=64)
    return out


@triton.jit
def _scale_tail_bug(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < (n // BLOCK) * BLOCK  # the bug: the last partial block is never written
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, (x * 2.0).to(out_ptr.dtype.element_ty), mask=mask)


def scale_tail_bug(x):
    out = torch.zeros_like(x)
    n = x.numel()
    _scale_tail_bug[(triton.cdiv(n, 64),)](x.contiguous(), out, n, BLOCK=64)
    return out
"""

REFERENCES = """
import numpy as np

def scale(x):
    return x * 2.0

def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)

def matmul(a, b):
    return a @ b
"""

CONFIG = """
[project]
name = "triton-kernels"
framework = "torch"

[validation]
dtypes = ["float32", "float16", "bfloat16"]
seed = 11

[ci]
quick_dtypes = ["float32", "float16", "bfloat16"]
quick_iterations = 4

[[ops]]
name = "scale"
op = "kernels:scale"
reference = "refs:scale"
family = "elementwise"
layouts = ["contiguous"]
[ops.dims]
N = { min = 1, max = 300, typical = [64, 100] }
[ops.inputs]
x = ["N"]

[[ops]]
name = "softmax"
op = "kernels:softmax"
reference = "refs:softmax"
family = "softmax"
[ops.dims]
M = [2, 5]
N = { min = 1, max = 200, typical = [37, 64] }
[ops.inputs]
x = ["M", "N"]

[[ops]]
name = "matmul"
op = "kernels:matmul"
reference = "refs:matmul"
family = "matmul"
output = ["M", "N"]
[ops.dims]
M = [16, 20]
K = [16, 33]
N = [16, 24]
[ops.inputs]
a = ["M", "K"]
b = ["K", "N"]

[[ops]]
name = "scale_via_bf16"
op = "kernels:scale_via_bf16"
reference = "refs:scale"
family = "elementwise"
dtypes = ["float32"]
tolerances = { float32 = { atol = 1e-2, rtol = 1e-2 } }
layouts = ["contiguous"]
[ops.dims]
N = [64, 100]
[ops.inputs]
x = ["N"]

[[ops]]
name = "scale_plain"
op = "kernels:scale"
reference = "refs:scale"
family = "elementwise"
dtypes = ["bfloat16"]
layouts = ["contiguous"]
[ops.triton]
sanitize = false
[ops.dims]
N = [64, 100]
[ops.inputs]
x = ["N"]

[[ops]]
name = "scale_tail_bug"
op = "kernels:scale_tail_bug"
reference = "refs:scale"
family = "elementwise"
layouts = ["contiguous"]
[ops.dims]
N = { min = 65, max = 300, typical = [100, 130] }
[ops.inputs]
x = ["N"]
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("triton-project")
    (root / "kernels.py").write_text(textwrap.dedent(KERNELS))
    (root / "refs.py").write_text(textwrap.dedent(REFERENCES))
    (root / "gpuemu.toml").write_text(textwrap.dedent(CONFIG))
    return root


@pytest.fixture(scope="module")
def run(project: Path) -> tuple[int, str, dict]:
    result = run_cli(["run", "--config", project / "gpuemu.toml", "--out", project / "out", "--no-lint"])
    return result.code, result.stderr, json.loads((project / "out" / "results.json").read_text())


def rows(document: dict, op: str) -> dict[str, dict]:
    (found,) = [o for o in document["ops"] if o["name"] == op]
    return {row["dtype"]: row for row in found["dtypes"]}


def op(document: dict, name: str) -> dict:
    (found,) = [o for o in document["ops"] if o["name"] == name]
    result: dict = found
    return result


@pytest.mark.slow
def test_bf16_cases_of_correct_kernels_are_judged_and_pass(run: tuple[int, str, dict]) -> None:
    _, _, document = run
    for name in ("scale", "softmax", "matmul"):
        by_dtype = rows(document, name)
        for dtype in ("float32", "float16", "bfloat16"):
            assert by_dtype[dtype]["status"] == "passed" and by_dtype[dtype]["cases_skipped"] == 0, by_dtype[
                dtype
            ]
        found = op(document, name)
        assert found["status"] == "passed" and found["interpreter"] == "triton-interpreter"
        assert found["cases_passed"] == found["cases_total"] > 0


@pytest.mark.slow
def test_an_fp32_kernel_with_a_bf16_intermediate_is_judged_too(run: tuple[int, str, dict]) -> None:
    _, _, document = run
    row = rows(document, "scale_via_bf16")["float32"]
    assert row["status"] == "passed" and row["cases_skipped"] == 0


@pytest.mark.slow
def test_a_real_bug_is_caught_in_every_dtype(run: tuple[int, str, dict]) -> None:
    code, _, document = run
    by_dtype = rows(document, "scale_tail_bug")
    assert {by_dtype[d]["status"] for d in ("float32", "float16", "bfloat16")} == {"failed"}
    assert code == 1 and document["verdict"] == "failed"
    assert document["summary"]["cases_skipped"] == 0


@pytest.mark.slow
def test_the_plain_interpreters_bf16_cases_are_not_judged_and_never_pass(run: tuple[int, str, dict]) -> None:
    _, _, document = run
    found = op(document, "scale_plain")
    assert found["status"] == "error" and found["cases_passed"] == 0
    assert found["cases_errored"] == found["cases_total"] > 0
    assert REASON in found["failures"][0]["message"] and "a GPU runs it" in found["failures"][0]["message"]
    assert "need a GPU" in found["message"]


@pytest.mark.slow
def test_every_output_says_what_ran_in_the_interpreter_and_what_was_not_judged(
    run: tuple[int, str, dict], project: Path, cli: Callable[..., object]
) -> None:
    _, stderr, _ = run
    assert REASON in stderr and "interpreter" in stderr
    results = project / "out" / "results.json"
    for fmt in ("comment", "summary", "sarif", "junit", "html", "annotations"):
        result = run_cli(["render", fmt, results])
        assert result.code == 0, result.output
        text = result.stdout
        if fmt != "annotations":
            for name in ("scale", "softmax", "matmul"):
                assert name in text
            assert "interpreter" in text.lower()
            assert "not judged" in text.lower(), fmt
