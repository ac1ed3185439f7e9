"""Op schemas as users write them: derived dims, ranges and typical sizes that name dims, kwargs bound to dims,
constraints as conditions, and the load-time errors (with the line) for names, cycles and derived sizes."""

from __future__ import annotations

import pytest

from gpuemu_ci.config.load import load_config
from gpuemu_ci.config.model import DEFAULT_MAX_ELEMENTS
from gpuemu_ci.errors import ConfigError, ExitCode

FILES = {"m/__init__.py": "", "m/ops.py": "def f(**kwargs):\n    return None\n"}

GQA = """
[ci]
max_elements = 100000

[[ops]]
name = "attn"
op = "m.ops:f"
reference = "m.ops:f"
family = "attention"
output = ["B", "H", "LQ", "D"]
max_elements = 5000
[ops.dims]
B = [1, 2]
KVH = [2, 8]
G = { min = 1, max = 8, typical = [1, 4] }
H = "KVH * G"
LQ = { min = 1, max = 512, typical = [128] }
P = { min = 0, max = 1024, typical = [0, 256] }
LK = "LQ + P"
D = [64]
[ops.inputs]
q = ["B", "H", "LQ", "D"]
k = ["B", "KVH", "LK", "D"]
v = ["B", "KVH", "LK", "D"]

[[ops]]
name = "pool"
op = "m.ops:f"
reference = "m.ops:f"
family = "exact"
kwargs = { kernel_size = [1, 3], padding = [0, 1], num_groups = "G", mode = "max", window = "L // 2" }
constraints = ["L + 2*padding >= kernel_size", "CB in (1, B)", "mode == 'max' and not RD > D"]
[ops.dims]
B = [1, 4]
CB = { min = 1, max = "B", typical = [1] }
G = [4]
L = { min = 1, max = 100, typical = [16] }
LO = "(L + 2*padding - kernel_size) // 1 + 1"
D = [64, 128]
RD = { min = 2, max = "D", typical = ["D", "D // 2"] }
[ops.inputs]
x = ["B", "G", "L"]
"""


def load(make_project, text: str):
    return load_config(make_project(text, FILES))


def error_of(make_project, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(make_project, text)
    assert info.value.exit_code is ExitCode.USAGE
    return info.value


def line_of(text: str, fragment: str) -> int:
    return next(i + 1 for i, line in enumerate(text.splitlines()) if fragment in line)


def test_derived_dims_bound_kwargs_and_named_ranges_load(make_project):
    config = load(make_project, GQA)
    attn, pool = config.op("attn"), config.op("pool")
    dims = {d.name: d for d in attn.shapes.dims}
    assert dims["H"].derived == "KVH * G" and dims["LK"].derived == "LQ + P"
    assert dims["H"].typical == (2,)  # static estimate at the first typical combination (KVH 2, G 1)
    assert attn.shapes.max_elements == 5000 and pool.shapes.max_elements == 100000
    assert dict(pool.shapes.kwarg_bindings) == {"num_groups": "G", "window": "L // 2"}
    assert dict(pool.shapes.kwargs)["mode"] == ("max",)  # a string naming no dim is passed as a string
    rd = next(d for d in pool.shapes.dims if d.name == "RD")
    assert rd.max_expr == "D" and rd.terms == ("D", "D // 2")
    assert [c.expression for c in pool.shapes.constraints][1] == "CB in (1, B)"


def test_ci_max_elements_defaults_and_quick_dtypes_default_to_every_dtype(make_project):
    config = load(make_project, GQA.replace("max_elements = 100000\n", ""))
    assert config.ci.max_elements == DEFAULT_MAX_ELEMENTS and config.ci.quick_dtypes is None
    assert (config.ci.quick_iterations, config.ci.quick_extra_dtype_iterations) == (16, 8)
    assert config.op("pool").shapes.max_elements == DEFAULT_MAX_ELEMENTS
    assert config.op("pool").error_model.precision_reference
    narrowed = load(
        make_project,
        GQA.replace("[ci]\n", '[ci]\nquick_dtypes = ["float32"]\nquick_extra_dtype_iterations = 4\n').replace(
            'family = "exact"\n', 'family = "exact"\nprecision_reference = false\n'
        ),
    )
    assert narrowed.ci.quick_dtypes == ("float32",) and narrowed.ci.quick_extra_dtype_iterations == 4
    assert not narrowed.op("pool").error_model.precision_reference
    error = error_of(make_project, GQA.replace("[ci]\n", "[ci]\nquick_dtypes = []\n"))
    assert "an empty list runs nothing" in str(error)


@pytest.mark.parametrize(
    ("change", "fragment", "message"),
    [
        (
            ('H = "KVH * G"', 'H = "KVH * GG"'),
            'H = "KVH * GG"',
            "names 'GG', which is neither a dim nor a kwarg",
        ),
        (
            ("G = { min = 1, max = 8, typical = [1, 4] }", 'G = "H // KVH"'),
            'G = "H // KVH"',
            "read one another in a cycle: G -> H -> G",
        ),
        (("LQ = { min = 1", "LQ = { min = 0"), "LK = ", None),  # fine: LK = LQ + P >= 0
        (
            ('LK = "LQ + P"', 'LK = "LQ - P"'),
            'LK = "LQ - P"',
            "LK = LQ - P is -128, below 0 with the typical sizes",
        ),
        (('LK = "LQ + P"', 'LK = "LQ / 3"'), 'LK = "LQ / 3"', "not a whole number"),
        (('LK = "LQ + P"', 'LK = { expr = "LQ + P", max = 300 }'), "LK = {", "outside [0, 300]"),
        (("D = [64]", 'D = { max = "Q" }'), "D = {", "`max` of dim `D` ('Q') names 'Q'"),
    ],
)
def test_schema_errors_name_the_line(make_project, change, fragment, message):
    text = GQA.replace(*change)
    if message is None:
        load(make_project, text)
        return
    error = error_of(make_project, text)
    assert message in str(error)
    assert error.line == line_of(text, fragment)


def test_a_derived_dim_negative_at_a_range_end_asks_for_a_constraint(make_project):
    text = GQA.replace('constraints = ["L + 2*padding >= kernel_size", ', "constraints = [")
    error = error_of(make_project, text)
    assert "LO = (L + 2*padding - kernel_size) // 1 + 1 is -1, below 0 with L = 1 (its min)" in str(error)
    assert "kernel_size = 3" in str(error) and "add a constraint" in str(error)
    assert error.line == line_of(text, "LO = ")


def test_constraints_the_typical_sizes_cannot_meet_are_named(make_project):
    text = GQA.replace('"CB in (1, B)"', '"CB in (3, 5)"')
    error = error_of(make_project, text)
    assert "no combination of the typical sizes satisfies the constraint 'CB in (3, 5)'" in str(error)
    assert error.line == line_of(text, "constraints = ")


@pytest.mark.parametrize(
    ("constraint", "message"),
    [
        ("CB in B", "`in` needs a literal tuple or list"),
        ("CB ** 2 > 1", "is not allowed"),
        ("Q > 1", "names 'Q', which is neither a dim nor a kwarg"),
        ("L >", "is not a valid expression"),
    ],
)
def test_bad_constraints_are_config_errors(make_project, constraint, message):
    error = error_of(make_project, GQA.replace('"CB in (1, B)"', f'"{constraint}"'))
    assert message in str(error)


def test_a_dim_and_a_kwarg_may_not_share_a_name(make_project):
    error = error_of(make_project, GQA.replace('mode = "max"', "B = 3"))
    assert "'B' is both a dim and a kwarg" in str(error)
