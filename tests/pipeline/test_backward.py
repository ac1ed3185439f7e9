"""`backward = true` (issue #20), end to end through `gpuemu-ci run`, `replay` and `minimize` with real worker
processes, real torch autograd and real NumPy vjps: each case also runs the op's backward on an upstream
gradient drawn from its seed, and each input's gradient is judged against the fp64 reference's VJP, named
"grad of <input>" wherever it fails."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# Every test here takes seconds (whole runs, real processes): the fast tier (-m "not slow") leaves them out.
pytestmark = pytest.mark.slow

pytest.importorskip("torch")

OPS = """
import numpy as np
import torch

CALLS = [0]


def _t(x):
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x))


def rms_ref(x, w, target, eps=1e-5):
    x, w = _t(x), _t(w)
    return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps) * w


def rms_numpy_ref(x, w, target, eps=1e-5):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w


class RMS(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, eps, bug):
        xf = x.float()
        rstd = torch.rsqrt((xf * xf).mean(dim=-1, keepdim=True) + eps)
        ctx.save_for_backward(x, w, rstd)
        ctx.bug = bug
        return (xf * rstd * w.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        x, w, rstd = ctx.saved_tensors
        xhat, gw = x.float() * rstd, g.float() * w.float()
        dx = rstd * (gw - xhat * (gw * xhat).mean(dim=-1, keepdim=True))
        if ctx.bug == "missing_term":
            dx = rstd * gw
        if ctx.bug == "scratch":
            x.mul_(0.5)  # uses its saved input as scratch
        if ctx.bug == "nondeterministic":
            CALLS[0] += 1
            if CALLS[0] % 2 == 0:
                dx = torch.nextafter(dx, torch.full_like(dx, float("inf")))
        return dx.to(x.dtype), (g.float() * xhat).sum(dim=0).to(w.dtype), None, None


def rms(x, w, target, eps=1e-5):
    return RMS.apply(x, w, eps, "")


def rms_missing_term(x, w, target, eps=1e-5):
    return RMS.apply(x, w, eps, "missing_term")


def rms_scratch(x, w, target, eps=1e-5):
    return RMS.apply(x, w, eps, "scratch")


def rms_nondeterministic(x, w, target, eps=1e-5):
    return RMS.apply(x, w, eps, "nondeterministic")


def rms_detached(x, w, target, eps=1e-5):
    with torch.no_grad():
        return RMS.apply(x, w, eps, "")


def row_loss_ref(x, w, target, eps=1e-5):
    x = _t(x)
    return torch.logsumexp(x, dim=-1)


def row_loss(x, w, target, eps=1e-5):
    return torch.logsumexp(x.float(), dim=-1).to(x.dtype)


def scale_np(x, w, target, eps=1e-5):
    return (x.astype(np.float32) * np.float32(3.0)).astype(x.dtype)


def scale_np_ref(x, w, target, eps=1e-5):
    return x * 3.0


def scale_vjp(x, w, target, grad_output, eps=1e-5):
    return {"x": (grad_output.astype(np.float32) * np.float32(3.0)).astype(x.dtype)}


def scale_vjp_extra(x, w, target, grad_output, eps=1e-5):
    return {"x": grad_output * 3.0, "w": np.zeros_like(w)}


def scale_vjp_ref(x, w, target, grad_output, eps=1e-5):
    return {"x": grad_output * 3.0}
"""


def config(op: str, reference: str, extra: str = "", family: str = "norm", framework: str = "torch") -> str:
    return f"""
[project]
name = "bw"

[validation]
dtypes = ["float32", "bfloat16"]

[ci]
quick_iterations = 4
quick_extra_dtype_iterations = 2

[[ops]]
name = "op"
op = "bw.ops:{op}"
reference = "bw.ops:{reference}"
framework = "{framework}"
family = "{family}"
backward = true
{extra}
[ops.dims]
M = {{ min = 1, max = 48, typical = [4, 32] }}
N = {{ min = 1, max = 300, typical = [64] }}
[ops.inputs]
x = ["M", "N"]
w = {{ dims = ["N"], kind = "affine_weight" }}
target = {{ dims = ["M"], dtype = "int64", kind = "index", high = "N" }}
"""


@pytest.fixture
def run_op(make_project: Callable[..., Path], cli, tmp_path: Path) -> Callable[..., tuple[Any, dict]]:
    """Runs the one op of `config(...)`; returns (CliResult, results.json's op entry)."""

    def run(*args: str, **kwargs: str) -> tuple[Any, dict]:
        path = make_project(config(*args, **kwargs), {"bw/__init__.py": "", "bw/ops.py": OPS})
        result = cli("run", "--config", path, "--out", tmp_path / "out", cwd=tmp_path)
        document = json.loads((tmp_path / "out" / "results.json").read_text())
        return result, document["ops"][0]

    return run


def test_a_correct_backward_passes_with_per_gradient_headroom_and_rule(run_op):
    result, op = run_op("rms", "rms_ref")
    assert result.code == 0, result.output
    assert op["status"] == "passed" and op["cases_total"] == 6
    for row in op["dtypes"]:
        gradients = {g["of"]: g for g in row["gradients"]}
        assert set(gradients) == {"w", "x"}  # the int64 target has none
        for g in gradients.values():
            assert g["rule"] == "bound"  # a norm's backward: row reductions, the family's structure bound
            assert 0 < g["worst_headroom"] <= 1


def test_reports_show_each_gradients_headroom_and_rule(run_op, cli, tmp_path: Path):
    result, op = run_op("rms", "rms_ref")
    assert result.code == 0, result.output
    results = tmp_path / "out" / "results.json"
    row = op["dtypes"][0]
    expected = ", ".join(
        f"grad of {g['of']} {g['worst_headroom']:.3g}× (bound)"
        for g in sorted(row["gradients"], key=lambda g: g["of"])
    )
    summary = cli("render", "summary", results)
    assert summary.code == 0 and "| gradients |" in summary.stdout
    assert f"| {expected} |" in summary.stdout
    page = cli("render", "html", results)
    assert page.code == 0 and f"<td>{expected}</td>" in page.stdout


def test_grad_inputs_limits_the_gradients_checked(run_op):
    result, op = run_op("rms", "rms_ref", 'grad_inputs = ["x"]')
    assert result.code == 0, result.output
    assert all([g["of"] for g in row["gradients"]] == ["x"] for row in op["dtypes"])


def test_a_missing_chain_rule_term_fails_naming_the_gradient_and_replays(run_op, cli, tmp_path):
    result, op = run_op("rms_missing_term", "rms_ref")
    assert result.code == 1
    assert op["status"] == "failed"
    failure = op["failures"][0]
    assert failure["output"] == "grad of x" and failure["kind"] == "mismatch"
    assert failure["message"].startswith("grad of x: ")
    assert "grad of x" in result.stderr
    # the forward is right: its own headroom stays within the bound
    assert all(row["worst_headroom"] <= 1 for row in op["dtypes"])
    # ... and the failure's figures are the gradient's, which the message quotes (not the forward's)
    assert failure["headroom"] > 1 and f"{failure['headroom']:.3g}" in failure["message"]
    assert failure["exceeded"] >= 1 and failure["worst_index"] is not None
    replay = cli(
        "replay", "--config", tmp_path / "gpuemu.toml", "--op", "op", "--seed", str(failure["case_seed"]),
        cwd=tmp_path,
    )  # fmt: skip
    assert replay.code == 1 and "REPRODUCED" in replay.stderr and "grad of x" in replay.stderr


def test_a_gradient_failure_minimizes_to_a_failure_of_the_same_gradient(run_op, cli, tmp_path):
    _, op = run_op("rms_missing_term", "rms_ref")
    seed = op["failures"][0]["case_seed"]
    done = cli(
        "minimize", "--config", tmp_path / "gpuemu.toml", "--op", "op", "--seed", str(seed), "--json",
        "--max-runs", "30", "--out", tmp_path / "min", cwd=tmp_path,
    )  # fmt: skip
    assert done.code == 1, done.output
    minimized = json.loads(done.stdout)
    assert minimized["output"] == "grad of x" and minimized["kind"] == "mismatch"
    assert "of the grad of x" in done.stderr
    replay = cli(
        "replay", "--config", tmp_path / "gpuemu.toml", "--snapshot", minimized["snapshot"], cwd=tmp_path
    )
    assert replay.code == 1 and "grad of x" in replay.stderr


def test_a_backward_that_writes_into_its_input_fails(run_op):
    result, op = run_op("rms_scratch", "rms_ref")
    assert result.code == 1
    kinds = {f["kind"] for f in op["failures"]}
    assert "inputs_modified" in kinds or any("wrote into its input" in f["message"] for f in op["failures"])


def test_a_nondeterministic_backward_fails_when_declared_deterministic(run_op):
    result, op = run_op("rms_nondeterministic", "rms_ref", "deterministic = true")
    assert result.code == 1
    assert any("grad of x: re-running forward and backward" in f["message"] for f in op["failures"])
    result, op = run_op("rms_nondeterministic", "rms_ref")
    assert result.code == 0, result.output  # not declared: one ulp is within the bound


def test_an_op_autograd_cannot_differentiate_fails_clearly(run_op):
    result, op = run_op("rms_detached", "rms_ref")
    assert result.code == 1
    assert "not differentiable through torch autograd" in op["failures"][0]["message"]


def test_a_reference_torch_cannot_differentiate_is_an_error_not_a_pass(run_op):
    result, op = run_op("rms", "rms_numpy_ref")
    assert result.code != 0
    assert op["status"] == "error"
    message = op["failures"][0]["message"]
    assert "reference's backward" in message and "vjp_reference" in message


def test_an_unknown_structure_is_judged_baseline_relative(run_op):
    result, op = run_op("row_loss", "row_loss_ref", 'output = ["M"]\ngrad_inputs = ["x"]', family="reduction")
    assert result.code == 0, result.output
    for row in op["dtypes"]:
        assert [(g["of"], g["rule"]) for g in row["gradients"]] == [("x", "baseline_relative")]
        assert row["gradients"][0]["worst_headroom"] <= 1


def test_numpy_op_with_vjp_and_vjp_reference(run_op):
    extra = 'vjp = "bw.ops:scale_vjp"\nvjp_reference = "bw.ops:scale_vjp_ref"\ngrad_inputs = ["x"]'
    result, op = run_op("scale_np", "scale_np_ref", extra, family="elementwise", framework="numpy")
    assert result.code == 0, result.output
    assert all([g["of"] for g in row["gradients"]] == ["x"] for row in op["dtypes"])


def test_a_vjp_returning_a_gradient_nobody_asked_for_fails(run_op):
    extra = 'vjp = "bw.ops:scale_vjp_extra"\nvjp_reference = "bw.ops:scale_vjp_ref"\ngrad_inputs = ["x"]'
    result, op = run_op("scale_np", "scale_np_ref", extra, family="elementwise", framework="numpy")
    assert result.code == 1
    failure = op["failures"][0]
    assert failure["kind"] == "bad_output"
    assert "gradient for w (inputs that do not require one)" in failure["message"]
