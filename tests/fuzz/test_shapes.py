"""Sizes per size class: derived dims and constraints in every case, the typical sizes as declared, caps only on
tool-chosen sizes (recorded, row dims kept), the tile ladder up to the max, and the large class."""

from __future__ import annotations

import dataclasses

import pytest

from gpuemu_ci.config.load import load_config
from gpuemu_ci.config.model import DimConstraint, Suite
from gpuemu_ci.errors import ConfigError
from gpuemu_ci.fuzz import large as large_mod
from gpuemu_ci.fuzz.case import CaseSkipped, build_case, case_dims
from gpuemu_ci.fuzz.large import LargeSkip, large_draw
from gpuemu_ci.fuzz.shapes import boundary_sizes, draw, tile_ladder
from gpuemu_ci.plan.expand import plan_op, stratum
from gpuemu_ci.plan.model import CaseStratum, SizeClass, ValueMode
from gpuemu_ci.rng import SeededRng

FILES = {"m/__init__.py": "", "m/ops.py": "def f(**kwargs):\n    return None\n"}

SCHEMAS = """
[validation]
dtypes = ["float32", "bfloat16"]

[[ops]]
name = "attn"
op = "m.ops:f"
reference = "m.ops:f"
family = "attention"
output = ["B", "H", "LQ", "D"]
[ops.dims]
B = [1, 2]
KVH = { min = 1, max = 8, typical = [2, 8] }
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
output = ["B", "C", "LO"]
kwargs = { kernel_size = [1, 2, 3], stride = [1, 2], padding = [0, 1], dilation = [1, 2], num_groups = "G" }
constraints = ["L + 2*padding >= dilation*(kernel_size - 1) + 1", "padding <= kernel_size // 2", "CB in (1, B)"]
[ops.dims]
B = [1, 4]
CB = { min = 1, max = "B", typical = [1] }
G = [2, 4]
CPG = { min = 1, max = 16, typical = [8] }
C = "G * CPG"
L = { min = 1, max = 2048, typical = [256] }
LO = "(L + 2*padding - dilation*(kernel_size - 1) - 1) // stride + 1"
[ops.inputs]
x = ["B", "C", "L"]
scale = ["CB", "C"]

[[ops]]
name = "rows"
op = "m.ops:f"
reference = "m.ops:f"
family = "reduction"
output = ["M"]
dtypes = ["float32"]
max_elements = 65536
[ops.dims]
M = { min = 1, max = 4096, typical = [128] }
N = { min = 1, max = 40000, typical = [4096] }
[ops.inputs]
x = ["M", "N"]

[[ops]]
name = "wide"
op = "m.ops:f"
reference = "m.ops:f"
family = "elementwise"
dtypes = ["float32"]
[ops.dims]
B = { min = 1, max = 64, typical = [8] }
S = { min = 1, max = 1048576, typical = [4096] }
H = { min = 1, max = 4096, typical = [1024] }
[ops.inputs]
x = ["B", "S", "H"]
"""


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("shapes")
    (root / "m").mkdir()
    for name, text in FILES.items():
        (root / name).write_text(text)
    (root / "gpuemu.toml").write_text(SCHEMAS)
    return load_config(root / "gpuemu.toml")


def cases(config, name: str, suite: Suite = Suite.QUICK, iterations: int = 16, seed: int = 7):
    op = config.op(name)
    refs = plan_op(op, seed, op.dtypes, iterations, suite)
    return op, [
        build_case(op, ref.seed, config.root)
        for ref in refs
        if stratum(op, ref.seed).size_class is not SizeClass.LARGE
    ]


@pytest.mark.slow
def test_derived_dims_bound_kwargs_and_constraints_hold_in_every_case(config):
    for name in ("attn", "pool"):
        op, built = cases(config, name, Suite.THOROUGH, 64)
        classes = {c.stratum.size_class for c in built}
        assert classes == {SizeClass.TYPICAL, SizeClass.BOUNDARY, SizeClass.TILE}
        for case in built:
            d, k = case.dims, case.kwargs
            for spec in op.shapes.inputs:  # every input has the shape its dims say
                assert case.arrays[spec.name].shape == tuple(
                    d[x] if isinstance(x, str) else x for x in spec.dims
                )
            if name == "attn":
                assert d["H"] == d["KVH"] * d["G"] and d["LK"] == d["LQ"] + d["P"]
            else:
                assert k["num_groups"] == d["G"] and d["C"] == d["G"] * d["CPG"]
                assert d["L"] + 2 * k["padding"] >= k["dilation"] * (k["kernel_size"] - 1) + 1
                assert k["padding"] <= k["kernel_size"] // 2 and d["CB"] in (1, d["B"])
                lo = (d["L"] + 2 * k["padding"] - k["dilation"] * (k["kernel_size"] - 1) - 1) // k[
                    "stride"
                ] + 1
                assert d["LO"] == lo >= 1


def test_kwargs_are_combined_pairwise_with_each_size_class(config):
    _, built = cases(config, "pool", Suite.THOROUGH, 64)
    for size_class in (SizeClass.BOUNDARY, SizeClass.TILE):
        seen = [c.kwargs for c in built if c.stratum.size_class is size_class]
        assert {k["kernel_size"] for k in seen} == {1, 2, 3}
        pairs = {(k["kernel_size"], k["dilation"]) for k in seen}
        assert {(3, 1), (3, 2), (2, 1), (2, 2)} <= pairs  # every value meets every other kwarg's values


def test_typical_sizes_run_exactly_as_declared_in_every_suite_and_dtype(config):
    op = config.op("rows")  # 128 x 4096 = 524288 elements, past this op's cap of 65536
    for suite in (Suite.QUICK, Suite.THOROUGH):
        refs = plan_op(op, 3, op.dtypes, 16, suite)
        built = [
            build_case(op, r.seed, config.root)
            for r in refs
            if stratum(op, r.seed).size_class is not SizeClass.LARGE
        ]
        typical = [c for c in built if c.stratum.size_class is SizeClass.TYPICAL]
        assert typical and all(dict(c.dims) == {"M": 128, "N": 4096} and not c.capped for c in typical)
        assert all(c.arrays["x"].shape == (128, 4096) for c in typical)


@pytest.mark.slow
def test_the_cap_shrinks_tool_chosen_rows_count_first_and_says_so(config):
    _, built = cases(config, "rows", Suite.THOROUGH, 64)
    drawn = [c for c in built if c.stratum.size_class is not SizeClass.TYPICAL]
    assert all(c.dims["M"] * c.dims["N"] <= 65536 for c in drawn)
    capped = [c for c in drawn if c.capped]
    # The row count gives way, except in the tile case that puts M itself at its declared max (issue #44):
    # there the rows shrink instead.
    at_max = [c for c in capped if c.stratum.size_class is SizeClass.TILE and c.dims["M"] == 4096]
    assert capped and all(
        {change.dim for change in c.capped} == {"M"} or c.dims["M"] == 1 for c in capped if c not in at_max
    )
    assert at_max and all({change.dim for change in c.capped} == {"N"} for c in at_max)
    for case in capped:
        for change in case.capped:
            assert change.kept < change.drawn and case.dims[change.dim] == change.kept
    # The rows stay long: the longest rows of the ladder ran, the row count gave way.
    assert {40000, 32769, 16385} <= {c.dims["N"] for c in drawn}


def test_the_quick_suite_steps_the_rows_down_the_tile_ladder_from_the_max(config):
    op = config.op("rows")
    built = [build_case(op, r.seed, config.root) for r in plan_op(op, 11, op.dtypes, 16)]
    tile = sorted(
        (c.stratum.counter, c.dims["N"], c.dims["M"]) for c in built if c.stratum.size_class is SizeClass.TILE
    )
    # N (the row) at its max first, then M (the row count) at its max in the second tile case, the cap shrinking
    # N there (issue #44: every dim at its max once per dtype), then N down the ladder from its second rung.
    assert [n for _, n, _ in tile] == [40000, 15, 32769, 16385, 8193, 4097, 2049]
    assert tile[1][2] == 4096
    assert tile_ladder(1, 40000)[:7] == (40000, 32769, 16385, 8193, 4097, 2049, 1025)
    assert tile_ladder(1, 100)[:4] == (100, 65, 33, 17) and 63 in tile_ladder(1, 100)


def test_boundary_sizes_stay_in_range_and_avoid_tile_multiples():
    sizes = boundary_sizes(1, 300)
    assert {1, 2, 3, 17, 63, 65, 127, 129, 255, 257} <= set(sizes)
    assert all(1 <= s <= 300 and s % 16 for s in sizes)
    assert 0 in boundary_sizes(0, 10) and boundary_sizes(32, 32) == (32,)


@pytest.mark.slow
def test_a_constraint_no_size_satisfies_is_named(config):
    op = config.op("rows")
    impossible = dataclasses.replace(
        op, shapes=dataclasses.replace(op.shapes, constraints=(DimConstraint("M > N + 50000", 12),))
    )
    boundary = CaseStratum("float32", ValueMode.REGULAR, SizeClass.BOUNDARY, True)
    with pytest.raises(
        ConfigError, match=r"no sizes of the boundary size class satisfy the constraint 'M > N \+ 50000'"
    ):
        draw(impossible, SeededRng(1), boundary)


@pytest.mark.slow
def test_rare_constraint_combinations_are_found_without_retrying_at_random(make_project):
    config = load_config(
        make_project(
            """
            [[ops]]
            name = "rare"
            op = "m.ops:f"
            reference = "m.ops:f"
            family = "exact"
            constraints = ["A % 7 == 3", "B == A + 2 or B == 2 * A", "C in (A, B, 1)"]
            [ops.dims]
            A = { min = 1, max = 5000, typical = [10] }
            B = { min = 1, max = 10000, typical = [12] }
            C = { min = 1, max = 10000, typical = [1] }
            [ops.inputs]
            x = ["A", "B", "C"]
            """,
            FILES,
        )
    )
    op = config.op("rare")
    seen = set()
    for ref in plan_op(op, 5, op.dtypes, 64):
        dims = build_case(op, ref.seed, config.root).dims
        assert (
            dims["A"] % 7 == 3
            and dims["B"] in (dims["A"] + 2, 2 * dims["A"])
            and dims["C"] in (dims["A"], dims["B"], 1)
        )
        seen.add(dims["A"])
    assert len(seen) > 4  # not stuck on one solution


def test_large_cases_cross_2_31_elements_then_2_31_bytes_whatever_the_machine(config, monkeypatch):
    op = config.op("rows")  # N up to 40000, M up to 4096: at most 163,840,000 elements
    by_elements = CaseStratum("float32", ValueMode.REGULAR, SizeClass.LARGE, True, counter=0)
    by_bytes = CaseStratum("float32", ValueMode.REGULAR, SizeClass.LARGE, True, counter=1)
    for stratum_, unit in ((by_elements, "elements"), (by_bytes, "bytes")):
        skipped = large_draw(op, SeededRng(1), stratum_)
        assert isinstance(skipped, LargeSkip) and f"keep `x` under 2^31 {unit}" in skipped.reason

    wide = config.op("wide")

    def elements(dims: dict[str, int]) -> int:
        return dims["B"] * dims["S"] * dims["H"]

    drawn = large_draw(wide, SeededRng(1), by_elements)
    assert not isinstance(drawn, LargeSkip)
    assert 2**31 < elements(drawn.dims) < 2**31 + 2 * 4096 * 1024  # just past 2^31 elements
    assert drawn.dims["H"] == 1024 and drawn.dims["B"] == 64  # the rows kept; the batch and S grew
    in_bytes = large_draw(wide, SeededRng(1), by_bytes)
    assert not isinstance(in_bytes, LargeSkip)
    assert 4 * elements(in_bytes.dims) > 2**31 and elements(in_bytes.dims) < 2**31  # 2^29 float32
    # The dims are the seed's alone: a machine with little free memory skips the case, it never shrinks it
    # (the op's worker and the judge's, reading the free memory at different moments, would disagree).
    monkeypatch.setattr(large_mod, "available_bytes", lambda: 1 << 30)
    assert large_draw(wide, SeededRng(1), by_elements) == drawn
    seed = next(
        r.seed
        for r in plan_op(wide, 1, ("float32",), 16, Suite.THOROUGH)
        if stratum(wide, r.seed).size_class is SizeClass.LARGE and stratum(wide, r.seed).counter == 0
    )
    assert elements(case_dims(wide, seed)) > 2**31  # what a shard's cost is dealt by, on every machine
    with pytest.raises(CaseSkipped, match=r"large sizes: .* needs about .* GiB, .* GiB usable here"):
        build_case(wide, seed, config.root)


def test_large_cases_put_each_drawn_dim_at_its_declared_max(config):
    op = config.op("attn")
    schema_dims = [d.name for d in op.shapes.dims if not d.is_derived]
    for counter, name in enumerate(schema_dims[:6], start=2):  # 0, 1: the crossings
        at_max = CaseStratum("float32", ValueMode.REGULAR, SizeClass.LARGE, True, counter=counter)
        drawn = large_draw(op, SeededRng(2), at_max, budget=1 << 40)
        assert not isinstance(drawn, LargeSkip)
        assert drawn.dims[name] == next(d.high for d in op.shapes.dims if d.name == name)


def test_only_thorough_and_nightly_plan_large_cases(config):
    op = config.op("attn")
    quick = {stratum(op, r.seed).size_class for r in plan_op(op, 1, op.dtypes, 16, Suite.QUICK)}
    thorough = [stratum(op, r.seed) for r in plan_op(op, 1, op.dtypes, 16, Suite.THOROUGH)]
    assert SizeClass.LARGE not in quick
    large = [s for s in thorough if s.size_class is SizeClass.LARGE]
    assert sorted(s.counter for s in large) == list(range(8)) and {s.dtype for s in large} == {"float32"}


def test_a_1d_input_does_not_make_its_dim_a_row(make_project):
    """The targets of a loss [BT] are one value per row: the vocabulary V is the row, and the first tile case
    runs the declared max V with the rows count shrunk to fit the cap."""
    config = load_config(
        make_project(
            """
            [[ops]]
            name = "loss"
            op = "m.ops:f"
            reference = "m.ops:f"
            family = "reduction"
            dtypes = ["float32"]
            output = ["BT"]
            [ops.dims]
            BT = [16]
            V = { min = 2, max = 65536, typical = [8192] }
            [ops.inputs]
            logits = ["BT", "V"]
            target = { dims = ["BT"], dtype = "int64", kind = "index", high = "V" }
            """,
            FILES,
        )
    )
    op = config.op("loss")
    first_tile = CaseStratum("float32", ValueMode.REGULAR, SizeClass.TILE, True, counter=0)
    drawn = draw(op, SeededRng(4), first_tile)
    assert drawn.dims["V"] == 65536 and drawn.dims["BT"] * 65536 <= op.shapes.max_elements
    assert [c.dim for c in drawn.capped] in ([], ["BT"])


PINNED = """
[validation]
dtypes = ["float32"]

[[ops]]
name = "heads"
op = "m.ops:f"
reference = "m.ops:f"
family = "elementwise"
[ops.dims]
T = [16, 100]
D = {d}
[ops.inputs]
x = ["T", "D"]
"""


@pytest.mark.parametrize(("declared", "pinned"), [("64", True), ("[64]", False)])
def test_a_bare_size_pins_its_dim_and_a_list_explores_below_it(tmp_path, declared: str, pinned: bool):
    """`D = 64` is a fixed head dim: no other D is ever drawn, in any suite (it drew 1, 13, 31 ... before);
    `D = [64]` is a typical size with the sizes below it explored."""
    (tmp_path / "m").mkdir()
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "gpuemu.toml").write_text(PINNED.format(d=declared))
    config = load_config(tmp_path / "gpuemu.toml")
    seen: set[int] = set()
    for suite in (Suite.QUICK, Suite.THOROUGH):
        _, built = cases(config, "heads", suite, 24)
        seen |= {int(dict(c.dims)["D"]) for c in built}
    assert (seen == {64}) is pinned, sorted(seen)
    assert 64 in seen
