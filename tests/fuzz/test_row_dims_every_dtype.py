"""Issue #32: the quick suite draws every row-shaping dim at its declared max in every dtype row, not only in
the first dtype's 16 cases (a vocabulary loop wrong only in a 16-bit kernel's path, visible only above 32,768
columns with 65,536 declared, was never drawn in the bf16 row)."""

from __future__ import annotations

import pytest

from gpuemu_ci.config.load import load_config
from gpuemu_ci.fuzz.case import case_dims
from gpuemu_ci.plan.expand import plan_op, stratum

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
        {"V": 65536},
    ),
    "group_norm": (
        "norm",
        "",
        "N = [2]\nC = { min = 1, max = 64, typical = [16] }\nL = { min = 1, max = 4096, typical = [256] }",
        'x = ["N", "C", "L"]',
        {"L": 4096},
    ),
}


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("master_seed", [1, 2, 3])
def test_each_dtype_row_of_the_quick_suite_draws_the_row_dims_at_their_max(make_project, name, master_seed):
    family, output, dims, inputs, wanted = OPS[name]
    config = load_config(
        make_project(CONFIG.format(name=name, family=family, output=output, dims=dims, inputs=inputs))
    )
    op = config.op(name)
    refs = plan_op(op, master_seed, op.dtypes, 16, extra_iterations=8)
    for dtype in op.dtypes:
        drawn = [case_dims(op, r.seed) for r in refs if stratum(op, r.seed).dtype == dtype]
        assert len(drawn) == (16 if dtype == op.dtypes[0] else 8)
        for dim, size in wanted.items():
            assert max(d[dim] for d in drawn) == size, (dtype, dim, sorted({d[dim] for d in drawn}))
