"""Upstream's Python API (gpuemu_ci.compat) over gpuemu-ci's gate: the calls upstream's README and guides make,
with their names and calling conventions, judged for real."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpuemu_ci.compat import (
    Client,
    ValidationError,
    calibrate_tolerance,
    fuzz_dtypes,
    fuzz_layouts,
    fuzz_shapes,
)
from gpuemu_ci.compat.validate import validate_op
from gpuemu_ci.errors import UsageError

CONFIG = """
[project]
name = "compat"
framework = "pytorch"

[validation]
dtypes = ["float32"]

[[ops]]
name = "gelu"
module = "ops"
reference = "scripts/ref_gelu.py"
family = "elementwise"
transcendental_ulps = 64
"""

REF = """
import numpy as np

def reference(inputs: dict, **kwargs) -> np.ndarray:
    x = inputs["x"]
    c = np.sqrt(2.0 / np.pi)
    return 0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x ** 3)))
"""
OPS = "import torch\n\ndef gelu(x):\n    return torch.nn.functional.gelu(x, approximate='tanh')\n"


@pytest.fixture
def client(make_project, tmp_path: Path) -> Client:
    config = make_project(CONFIG, {"ops.py": OPS, "scripts/ref_gelu.py": REF})
    return Client(config=config, out_dir=tmp_path / "out")


def _gelu(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    out: np.ndarray = (0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64**3)))).astype(
        x.dtype
    )
    return out


@pytest.mark.slow
def test_fuzz_op_client_side_runs_run_op_on_the_inputs_dict(client: Client) -> None:
    seen: list[type] = []

    def run_op(inputs: dict) -> np.ndarray:
        seen.append(type(inputs["x"]))
        return _gelu(inputs["x"])

    results = client.fuzz_op_client_side("gelu", run_op=run_op, iterations=6, seed=42)
    assert (results.passed, results.total, results.failures) == (6, 6, [])
    assert set(seen) == {np.ndarray}  # NumPy, as upstream's client decoded them


@pytest.mark.slow
def test_a_wrong_run_op_fails_with_seeds(client: Client) -> None:
    results = client.fuzz_op_client_side(
        "gelu", run_op=lambda i: _gelu(i["x"]) * np.float32(1.001), iterations=4, value_distribution="regular"
    )
    assert results.passed < results.total and results.failures
    failure = results.failures[0]
    assert failure.seed > 0 and failure.failures[0]["message"]


def test_unknown_op_and_op_schema_are_refused_with_the_fix(client: Client) -> None:
    with pytest.raises(UsageError, match="did you mean 'gelu'"):
        client.fuzz_op_client_side("gelu2", run_op=lambda i: i["x"])
    with pytest.raises(UsageError, match=r"\[ops.dims\]"):
        client.fuzz_op_client_side("gelu", run_op=lambda i: i["x"], op_schema={"name": "gelu"})


@pytest.mark.slow
def test_validate_pytorch_with_per_call_tolerances(client: Client) -> None:
    torch = pytest.importorskip("torch")
    from gpuemu_ci.compat.frameworks.pytorch import validate_pytorch

    x = torch.randn(2, 8, 16)
    with validate_pytorch(client, "gelu", {"x": x}) as ctx:
        ctx["output"] = torch.nn.functional.gelu(x, approximate="tanh")
    with (
        pytest.raises(ValidationError, match="gelu failed validation"),
        validate_pytorch(client, "gelu", {"x": x}) as ctx,
    ):
        ctx["output"] = torch.nn.functional.gelu(x)  # erf, not tanh
    with validate_pytorch(client, "gelu", {"x": x}, atol=1e-2, rtol=1e-1) as ctx:  # loose enough for erf
        ctx["output"] = torch.nn.functional.gelu(x)
    with pytest.raises(ValidationError, match="no output captured"), validate_op(client, "gelu", {"x": x}):
        pass


@pytest.mark.slow
def test_inputs_that_do_not_fit_the_op_are_never_passed(client: Client) -> None:
    x = np.ones((4,), dtype=np.float32)  # rank 1; the op's inputs are [B, S, H]
    with pytest.raises(ValidationError, match="not judged"), validate_op(client, "gelu", {"x": x}) as ctx:
        ctx["output"] = _gelu(x)


@pytest.mark.slow
def test_daemon_orchestrated_loop_get_test_batch_then_submit_output(client: Client) -> None:
    batch = client.get_test_batch("gelu", count=3, seed=7)
    assert len(batch) == 3 and {case["dtype"] for case in batch} == {"float32"}
    results = [client.submit_output("gelu", c["inputs"], _gelu(c["inputs"]["x"]), c["seed"]) for c in batch]
    assert all(r.passed for r in results), [r.failures for r in results]
    wrong = client.submit_output("gelu", batch[0]["inputs"], batch[0]["inputs"]["x"], batch[0]["seed"])
    assert not wrong.passed and wrong.seed == batch[0]["seed"]


def test_calibrate_tolerance_as_upstream_calls_it() -> None:
    tol = calibrate_tolerance(
        reference_fn=lambda a, b: a.astype(np.float64) @ b.astype(np.float64),
        test_fn=lambda a, b: a @ b,
        input_shapes=[(8, 64), (64, 4)],
        dtype="float32",
        n_samples=20,
        percentile=99.0,
        safety_margin=2.0,
    )
    assert 0 < tol.atol < 1e-4 and tol.rtol > 0 and len(tol.max_abs) == 20
    again = calibrate_tolerance(lambda a: a, lambda a: a + 1e-3, [(3,)], n_samples=5)
    assert again.atol == pytest.approx(2e-3, rel=1e-3)


def test_fuzz_generators() -> None:
    assert list(fuzz_shapes(batch=[1, 2], seq=[3])) == [(1, 3), (2, 3)]
    assert list(fuzz_dtypes(["float32", "float16", "float32"])) == ["float32", "float16"]
    layouts = list(fuzz_layouts((2, 4, 6)))
    assert layouts[0] == ((2, 4, 6), (24, 6, 1))
    assert ((2, 6, 4), (24, 1, 6)) in layouts
    base = np.arange(48.0).reshape(2, 4, 6)
    for shape, strides in layouts:  # every view fits in the base tensor's storage
        np.lib.stride_tricks.as_strided(base, shape, tuple(s * base.itemsize for s in strides))


def test_ping_says_there_is_no_daemon(client: Client) -> None:
    assert client.ping()["daemon"] is False
