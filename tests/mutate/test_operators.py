"""Every mutation operator: the change it makes (on the kernels of tests/mutate/project, read as text: no user code
runs), and, through the real CLI and worker processes with Triton's interpreter, that the op's suite kills
it on the kernel where the change matters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuemu_ci.mutate.kernel import find_kernel
from gpuemu_ci.mutate.source import SourceFile
from gpuemu_ci.mutate.triton_operators import OPERATORS
from tests.support_cli import run_cli

pytest.importorskip("triton")
pytest.importorskip("torch")

PROJECT = Path(__file__).parent / "project"
KERNELS = SourceFile((PROJECT / "mutation_kernels" / "kernels.py").read_text())

# operator -> (the kernel where it matters, the op that runs it, a line it changes, that line changed)
WHERE_IT_MATTERS = {
    "bound_flipped": (
        "_mean",
        "mean",
        "x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0).to(tl.float32)",
        "x = tl.load(x_ptr + row * N + cols, mask=cols <= N, other=0.0).to(tl.float32)",
    ),
    "bound_shifted": (
        "_add_bias",
        "add_bias",
        "tl.store(y_ptr + row * N + cols, x + b, mask=cols < N)",
        "tl.store(y_ptr + row * N + cols, x + b, mask=cols < N - 1)",
    ),
    "other_dropped": (
        "_row_max",
        "row_max",
        'x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=-float("inf"))',
        "x = tl.load(x_ptr + row * N + cols, mask=cols < N)",
    ),
    "other_zeroed": (
        "_row_max",
        "row_max",
        'x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=-float("inf"))',
        "x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0)",
    ),
    "accumulator_reset": (
        "_row_sum",
        "row_sum",
        "acc += tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0).to(tl.float32)",
        "acc = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0).to(tl.float32)",
    ),
    "offset_shifted": (
        "_scale",
        "scale",
        "tl.store(y_ptr + rows[:, None] * N + cols[None, :], 2.0 * x, mask=mask)",
        "tl.store(y_ptr + rows[:, None] * N + cols[None, :] + 1, 2.0 * x, mask=mask)",
    ),
    "stride_swapped": (
        "_scale",
        "scale",
        "x = tl.load(x_ptr + rows[:, None] * stride_m + cols[None, :] * stride_n, mask=mask, other=0.0)",
        "x = tl.load(x_ptr + rows[:, None] * stride_n + cols[None, :] * stride_n, mask=mask, other=0.0)",
    ),
    "accumulator_narrowed": (
        "_mean",
        "mean",
        "x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0).to(tl.float32)",
        "x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0).to(x_ptr.dtype.element_ty)",
    ),
    "term_dropped": (
        "_add_bias",
        "add_bias",
        "tl.store(y_ptr + row * N + cols, x + b, mask=cols < N)",
        "tl.store(y_ptr + row * N + cols, x, mask=cols < N)",
    ),
    "rescale_dropped": (
        "_log_sum_exp",
        "log_sum_exp",
        "s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)",
        "s = s + tl.sum(tl.exp(x - m_new), axis=0)",
    ),
    "program_id_swapped": (
        "_scale",
        "scale",
        "rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)",
        "rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)",
    ),
    "where_removed": (
        "_row_max_where",
        "row_max_where",
        'tl.store(y_ptr + row, tl.max(tl.where(cols < N, x, -float("inf")), axis=0))',
        "tl.store(y_ptr + row, tl.max(x, axis=0))",
    ),
    "block_for_size": (
        "_mean",
        "mean",
        "tl.store(y_ptr + row, (tl.sum(x, axis=0) / N).to(y_ptr.dtype.element_ty))",
        "tl.store(y_ptr + row, (tl.sum(x, axis=0) / BLOCK).to(y_ptr.dtype.element_ty))",
    ),
    "atomic_to_store": (
        "_col_sum",
        "col_sum",
        "tl.atomic_add(y_ptr + cols, tl.sum(x, axis=0), mask=cols < N)",
        "tl.store(y_ptr + cols, tl.sum(x, axis=0), mask=cols < N)",
    ),
}


def test_every_operator_has_a_kernel_where_it_matters() -> None:
    assert set(WHERE_IT_MATTERS) == {op.name for op in OPERATORS}


@pytest.mark.parametrize("operator", [op.name for op in OPERATORS])
def test_the_change_each_operator_makes(operator: str) -> None:
    kernel_name, _, before, after = WHERE_IT_MATTERS[operator]
    kernel = find_kernel(KERNELS, kernel_name, 1)
    assert kernel is not None
    (chosen,) = [op for op in OPERATORS if op.name == operator]
    diffs = [KERNELS.diff_lines(change) for change in chosen.changes(kernel)]
    assert (before, after) in diffs
    for change in chosen.changes(kernel):  # every mutant is a whole, valid file that differs from the kernel
        changed = KERNELS.changed(change)
        compile(changed, "kernels.py", "exec")
        assert changed != KERNELS.text


def test_a_change_keeps_the_rest_of_the_file_byte_for_byte() -> None:
    kernel = find_kernel(KERNELS, "_add_bias", 1)
    assert kernel is not None
    (change,) = [c for op in OPERATORS if op.name == "term_dropped" for c in op.changes(kernel)]
    changed = KERNELS.changed(change).splitlines()
    original = KERNELS.text.splitlines()
    differing = [i for i, (a, b) in enumerate(zip(original, changed, strict=True)) if a != b]
    assert len(differing) == 1 and len(changed) == len(original)


@pytest.fixture(scope="module")
def mutated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`gpuemu-ci mutate` on the project, every operator, every mutant (once for the module)."""
    out = tmp_path_factory.mktemp("mutate")
    result = run_cli(
        ["mutate", "--config", PROJECT / "gpuemu.toml", "--out", out, "--no-cache", "--jobs", "2"]
    )
    assert result.code == 0, result.stderr
    document: dict[str, Any] = json.loads((out / "results.json").read_text())
    document["stderr"] = result.stderr
    return document


@pytest.mark.slow
@pytest.mark.parametrize("operator", [op.name for op in OPERATORS])
def test_the_suite_kills_each_operators_mutant_where_it_matters(
    mutated: dict[str, Any], operator: str
) -> None:
    _, op_name, before, after = WHERE_IT_MATTERS[operator]
    (op,) = [op for op in mutated["mutation"]["ops"] if op["op"] == op_name]
    (mutant,) = [
        m for m in op["mutants"] if m["operator"] == operator and (m["before"], m["after"]) == (before, after)
    ]
    assert mutant["status"] == "killed", mutant
    assert mutant["killed_by"] and mutant["case"] and mutant["case_seed"]


@pytest.mark.slow
def test_a_change_no_output_reaches_is_equivalent_and_every_op_is_scored(mutated: dict[str, Any]) -> None:
    # add_bias stores only the lanes it loaded: dropping `other=0.0` changes no output bit.
    (op,) = [op for op in mutated["mutation"]["ops"] if op["op"] == "add_bias"]
    dropped = [m for m in op["mutants"] if m["operator"] == "other_dropped"]
    assert dropped and all(m["status"] == "equivalent?" for m in dropped)
    assert all(op["scored"] and op["score"] is not None for op in mutated["mutation"]["ops"])
    assert "mutation score" in mutated["stderr"]
    assert mutated["ops"] and all(op["status"] == "passed" for op in mutated["ops"])
