"""A failure names the party that raised: the op, the reference, the inputs hook or gpuemu-ci's own setup of
the case (issue #52, item 4). Before, every case that could not be judged was put down to "the reference" in
the op's note (an inputs hook's exception included), and a hook or setup failure in the op's worker alone was
reported as the op's own crash: a failed op, the gate blaming code that never ran."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.hostile.support_hostile import gpuemu, op_table, write_project

OPS = """
import os, signal
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

def ok(x):
    return x * x.dtype.type(2)

def ref(x):
    return x * 2.0

def op_raises(x):
    raise ValueError("the op's own error")

def ref_raises(x):
    raise ValueError("the reference's own error")

def hook_raises(rng, dims, dtype, kwargs):
    raise ValueError("the hook's own error")

def hook_dies_once(rng, dims, dtype, kwargs):
    # The first call ever (the op's worker, on the first case) dies; the judge's worker then builds the inputs.
    try:
        os.close(os.open(os.path.join(HERE, "hook-died"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return {"x": np.linspace(-1, 1, dims["N"]).astype(dtype)}
    os.kill(os.getpid(), signal.SIGKILL)
"""

# The op's module breaks gpuemu-ci's input generation in its own worker as it is imported: the case's setup
# fails there, before the op is called (the reference lives elsewhere, so the judge's worker is unharmed).
SABOTAGE = """
import gpuemu_ci.backends.calling as calling

def _no_inputs(*args, **kwargs):
    raise RuntimeError("the generator was taken away")

calling.case_inputs = _no_inputs
calling.unpack = _no_inputs  # the inputs the pool built and shipped (backends/shipped_inputs.py) too

def scale(x):
    return x * x.dtype.type(2)
"""


@pytest.fixture(scope="module")
def ops(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    root = tmp_path_factory.mktemp("parties")
    (root / "sabotage.py").write_text(SABOTAGE)
    tables = [
        op_table("op_raises", "ops:op_raises"),
        op_table("ref_raises", "ops:ok", "ops:ref_raises"),
        op_table("hook_raises", "ops:ok", extra='inputs_hook = "ops:hook_raises"'),
        op_table("hook_dies_in_the_op_worker", "ops:ok", extra='inputs_hook = "ops:hook_dies_once"'),
        op_table("setup_broken_in_the_op_worker", "sabotage:scale"),
    ]
    config = write_project(root, OPS, tables, iterations=3)
    done = gpuemu(config, "--out", "out", "--jobs", "1")
    assert done.returncode in (1, 3), done.stderr[-3000:]
    results = json.loads((root / "out" / "results.json").read_text())
    return {op["name"]: op for op in results["ops"]}


def _first(op: dict[str, Any]) -> dict[str, Any]:
    assert op["failures"], op
    failure: dict[str, Any] = op["failures"][0]
    return failure


@pytest.mark.slow
def test_the_op_raising_is_the_ops_failure(ops: dict[str, dict[str, Any]]) -> None:
    op = ops["op_raises"]
    failure = _first(op)
    assert op["status"] == "failed" and not failure["errored"]
    assert failure["party"] == "op" and failure["message"].startswith("the op raised: ValueError")


@pytest.mark.slow
def test_the_reference_raising_is_the_references(ops: dict[str, dict[str, Any]]) -> None:
    op = ops["ref_raises"]
    failure = _first(op)
    assert op["status"] == "error" and failure["errored"] and failure["party"] == "reference"
    assert failure["message"].startswith("the reference raised: ValueError")
    assert op["message"].endswith("cases could not be judged (the reference failed)")


@pytest.mark.slow
def test_the_inputs_hook_raising_is_the_hooks(ops: dict[str, dict[str, Any]]) -> None:
    op = ops["hook_raises"]
    failure = _first(op)
    assert op["status"] == "error" and failure["errored"] and failure["party"] == "inputs hook"
    assert "inputs hook 'ops:hook_raises' failed: ValueError" in failure["message"]
    assert op["message"].endswith("cases could not be judged (the inputs hook failed)"), op["message"]
    assert "reference" not in op["message"]


@pytest.mark.slow
def test_an_inputs_hook_dying_in_the_ops_worker_is_the_hooks_not_the_ops(
    ops: dict[str, dict[str, Any]],
) -> None:
    op = ops["hook_dies_in_the_op_worker"]
    (failure,) = op["failures"]
    assert op["status"] == "error" and op["cases_failed"] == 0 and op["cases_errored"] == 1
    assert failure["errored"] and failure["party"] == "inputs hook" and failure["kind"] == "crashed"
    assert failure["message"].startswith(
        "in the op's worker, before the op was called: the inputs hook crashed"
    )
    assert "killed by SIGKILL" in failure["message"]
    assert op["message"].endswith("(the inputs hook failed)")


@pytest.mark.slow
def test_the_cases_setup_failing_in_the_ops_worker_is_the_setups(ops: dict[str, dict[str, Any]]) -> None:
    op = ops["setup_broken_in_the_op_worker"]
    failure = _first(op)
    assert op["status"] == "error" and op["cases_failed"] == 0
    assert failure["errored"] and failure["party"] == "setup"
    assert "the case's setup failed: generating its inputs raised RuntimeError" in failure["message"]
    assert "the generator was taken away" in failure["message"]
    assert op["message"].endswith("(the case's setup failed)")
