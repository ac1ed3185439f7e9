"""A Triton kernel's backward under Triton's CPU interpreter (issue #20, item 4): the fused RMSNorm of the bug
corpus (bench/corpus/corpus_kernels/triton_backward.py), forward and backward kernels behind a
torch.autograd.Function. fp32, fp16 and bf16 cases are judged, gradients included (the layer computes bf16 as
the GPU does: triton_cpu/lowp.py); the bug (dweight's row blocks summed with `=`) is caught and named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support_cli import CliResult

# Every test here takes seconds (whole runs, real processes): the fast tier (-m "not slow") leaves them out.
pytestmark = pytest.mark.slow

pytest.importorskip("torch")
pytest.importorskip("triton")

KERNELS = Path(__file__).resolve().parents[2] / "bench" / "corpus" / "corpus_kernels"

CONFIG = """
[project]
name = "triton-backward"

[validation]
dtypes = ["float32", "float16", "bfloat16"]

[ci]
quick_iterations = 4
quick_extra_dtype_iterations = 2

[[ops]]
name = "rmsnorm"
op = "kernels.triton_backward:{op}"
reference = "kernels.backward:rmsnorm_reference"
framework = "torch"
family = "norm"
backward = true
[ops.dims]
M = {{ min = 1, max = 48, typical = [4, 40] }}
D = {{ min = 1, max = 300, typical = [64] }}
[ops.inputs]
x = ["M", "D"]
weight = {{ dims = ["D"], kind = "affine_weight" }}
"""


def run(make_project, cli, tmp_path: Path, op: str, *extra: str) -> tuple[CliResult, dict]:
    path = make_project(CONFIG.format(op=op))
    (tmp_path / "kernels").mkdir(exist_ok=True)
    (tmp_path / "kernels" / "__init__.py").write_text("")
    for name in ("backward.py", "triton_backward.py"):
        shutil.copy(KERNELS / name, tmp_path / "kernels" / name)
    result = cli("run", "--config", path, "--out", tmp_path / "out", *extra, cwd=tmp_path)
    return result, json.loads((tmp_path / "out" / "results.json").read_text())["ops"][0]


def test_triton_backward_is_judged_in_the_interpreter_bf16_included(make_project, cli, tmp_path):
    result, op = run(make_project, cli, tmp_path, "rmsnorm")
    assert result.code == 0, result.output
    assert "PASSED - ops 1 passed" in result.stderr and op["cases_skipped"] == 0
    assert op["interpreter"] == "triton-interpreter"
    rows = {row["dtype"]: row for row in op["dtypes"]}
    for dtype in ("float32", "float16", "bfloat16"):
        assert rows[dtype]["status"] == "passed" and rows[dtype]["cases_skipped"] == 0
        gradients = {g["of"]: g for g in rows[dtype]["gradients"]}
        assert set(gradients) == {"weight", "x"}
        assert all(0 < g["worst_headroom"] <= 1 and g["rule"] == "bound" for g in gradients.values())


def test_triton_backward_bug_is_caught_and_named(make_project, cli, tmp_path):
    result, op = run(make_project, cli, tmp_path, "rmsnorm_dw_acc_assign")
    assert result.code == 1
    failures = op["failures"]
    assert failures and {f["output"] for f in failures} == {"grad of weight"}
    assert {f["dtype"] for f in failures} <= {"float32", "float16", "bfloat16"}
