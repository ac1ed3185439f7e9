"""In the quick suite every drawn dim whose size varies reaches its declared max at least once per op and dtype,
the other dims shrunk to fit the element cap (issue #44): dims no output keeps (a vocabulary summed into a scalar
loss, where a loop over 16,384-logit chunks is wrong only past the first chunk) and dims that shape no row (a
batch, a head count) included, however many dims the op has; and the coverage says so. Issue #32 asked it of the
row dims in every dtype row, not only in the first dtype's 16 cases (a vocabulary loop wrong only in a 16-bit
kernel's path, visible only above 32,768 columns with 65,536 declared, was never drawn in the bf16 row)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpuemu_ci.config.load import load_config
from gpuemu_ci.config.model import OpSpec
from gpuemu_ci.fuzz.case import case_dims
from gpuemu_ci.plan.expand import plan_op, stratum
from gpuemu_ci.plan.maxima import dims_at_max
from gpuemu_ci.render.coverage import coverage_row
from gpuemu_ci.results.coverage import CoverageTally
from gpuemu_ci.results.model import OpResult, OpStatus

CONFIG = """
[validation]
dtypes = ["float32", "float16", "bfloat16", "float64"]

[[ops]]
name = "{name}"
op = "m:f"
reference = "m:f"
family = "{family}"
{output}
[ops.dims]
{dims}
[ops.inputs]
{inputs}
"""

OPS = {
    "xent": (
        "reduction",
        'output = ["BT"]',
        "BT = { min = 1, max = 32, typical = [8] }\nV = { min = 2, max = 65536, typical = [8192] }",
        'logits = ["BT", "V"]',
    ),
    "group_norm": (
        "norm",
        "",
        "N = [2]\nC = { min = 1, max = 64, typical = [16] }\nL = { min = 1, max = 4096, typical = [256] }",
        'x = ["N", "C", "L"]',
    ),
    # reduction="sum": one loss for the batch, so both BT and V are reduced away (the case).
    "xent_sum": (
        "reduction",
        "output = []",
        "BT = { min = 1, max = 32, typical = [8] }\nV = { min = 2, max = 65536, typical = [8192] }",
        'logits = ["BT", "V"]\ntarget = { dims = ["BT"], dtype = "int64", kind = "index", high = "V" }',
    ),
    # Five varying dims, more than the three tile cases of a further dtype's eight.
    "attention": (
        "attention",
        'output = ["B", "H", "S", "D"]',
        "B = [1, 2]\nH = { min = 1, max = 16, typical = [8] }\nS = { min = 1, max = 2048, typical = [128] }\n"
        "T = { min = 1, max = 2048, typical = [128] }\nD = { min = 1, max = 128, typical = [64] }",
        'q = ["B", "H", "S", "D"]\nk = ["B", "H", "T", "D"]\nv = ["B", "H", "T", "D"]',
    ),
    "batched_rows": (
        "softmax",
        "",
        "B = { min = 1, max = 64, typical = [4] }\nM = { min = 1, max = 512, typical = [8] }\n"
        "N = { min = 1, max = 4096, typical = [1024] }",
        'x = ["B", "M", "N"]',
    ),
}


def _op(make_project: Callable[[str], Path], name: str) -> OpSpec:
    family, output, dims, inputs = OPS[name]
    config = load_config(
        make_project(CONFIG.format(name=name, family=family, output=output, dims=dims, inputs=inputs))
    )
    return config.op(name)


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("master_seed", [1, 2, 3, 4, 5])
def test_every_varying_dim_reaches_its_declared_max_in_every_dtype(make_project, name, master_seed):
    op = _op(make_project, name)
    refs = plan_op(op, master_seed, op.dtypes, 16, extra_iterations=8)
    for dtype in op.dtypes:
        drawn = [case_dims(op, r.seed) for r in refs if stratum(op, r.seed).dtype == dtype]
        assert len(drawn) >= (16 if dtype == op.dtypes[0] else 8)
        for dim in op.shapes.dims:
            assert max(d[dim.name] for d in drawn) == dim.high, (
                dtype,
                dim.name,
                sorted({d[dim.name] for d in drawn}),
            )
        for d in drawn:  # the element cap still holds on every tool-chosen size
            for spec in op.shapes.inputs:
                size = 1
                for axis in spec.dims:
                    size *= d[axis] if isinstance(axis, str) else axis
                assert size <= max(op.shapes.max_elements, _typical_size(op, spec.name))


def _typical_size(op: OpSpec, name: str) -> int:
    spec = next(s for s in op.shapes.inputs if s.name == name)
    size = 1
    for axis in spec.dims:
        dim = op.shapes.dim(axis) if isinstance(axis, str) else None
        size *= max(dim.typical) if dim is not None else int(axis)
    return size


def test_a_dtype_gets_a_tile_case_for_each_varying_dim(make_project):
    op = _op(make_project, "attention")
    assert dims_at_max(op) == ("T", "D", "B", "H", "S")  # the dims that shape rows first
    refs = plan_op(op, 1, op.dtypes, 16, extra_iterations=8)
    per_dtype = {d: sum(1 for r in refs if stratum(op, r.seed).dtype == d) for d in op.dtypes}
    # 16 and 8 slots hold 7 and 3 tile cases; five dims need two more in each further dtype.
    assert per_dtype == {"float32": 16, "float16": 10, "bfloat16": 10, "float64": 10}


def test_the_coverage_table_says_which_declared_maxima_were_reached():
    tally = CoverageTally(max_elements=1 << 18, declared_max={"BT": 32, "V": 65536})
    for dims in ({"BT": 8, "V": 65536}, {"BT": 16, "V": 2}):
        tally.add(dims=dims, size_class="tile", layouts=(), mode="regular", kwargs={}, capped=())
    op = OpResult("xent", OpStatus.PASSED, "reduction", "bound", 1, "numpy", None, None, None, 2, 2, 0, 0)
    row = coverage_row(op, "float32", tally.result())
    assert "V 2–65536 (max)" in row.dims and "BT 8–16" in row.dims
    assert "declared max not reached: BT 32 (largest 16)" in row.notes
