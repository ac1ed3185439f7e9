"""Case generation: pinned bytes, replay from the seed alone, real layouts, coverage of every stratum."""

from __future__ import annotations

import hashlib
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from gpuemu_ci.backends.loading import load_callable
from gpuemu_ci.config.load import load_config
from gpuemu_ci.config.model import Layout
from gpuemu_ci.fuzz import layouts as layout_mod
from gpuemu_ci.fuzz.case import build_case as build_with
from gpuemu_ci.plan.expand import SLOTS, plan_op, stratum
from gpuemu_ci.plan.model import SizeClass, ValueMode

CONFIG = """
[validation]
dtypes = ["float32", "float16", "bfloat16", "int32", "bool"]
[[ops]]
name = "mix"
op = "m:f"
reference = "m:f"
family = "matmul"
output = ["M", "N"]
[ops.dims]
M = { min = 1, max = 300, typical = [64, 128] }
K = { min = 1, max = 300, typical = [32, 256] }
N = [16, 64]
[ops.inputs]
a = ["M", "K"]
b = ["K", "N"]
ids = { dims = ["M"], dtype = "int64", kind = "index", high = "N" }
"""

# SHA-256 (first 16 hex) of the logical inputs of cases of the config above, master seed 1234: any change to
# the generator must show up here and bump GENERATOR_VERSION (4: size classes, new value modes and kinds; 6: the
# tile rung of the row dims counts per dtype).
PINNED = {
    1: "069a5b3202c3bf24",  # bool regular (tile)
    4: "909e29c83d1c98f5",  # float16 adversarial:wide_range (tile)
    7: "ec30cd64067bdaf7",  # float32 boundary (boundary)
    13: "afbeee8c26fcd29b",  # float16 adversarial:ascending (tile)
    16: "5f9e1df232abb252",  # bfloat16 regular (typical)
    21: "0dd766881be950d7",  # float32 regular (tile)
    22: "2590947b72b0ec16",  # float32 adversarial:offset (typical)
    24: "7172b6608db1e379",  # bfloat16 boundary (boundary)
    33: "ab1407bb130c1b35",  # float16 adversarial:underflow_rows (tile)
    36: "9323941a7c90aa3a",  # bfloat16 adversarial:cancellation (boundary)
    41: "f3e5b70d53d0c2be",  # float32 adversarial:zero_rows (boundary)
    49: "a1db539cc17c870a",  # int32 boundary (boundary)
    55: "e6bb43e9563600bb",  # int32 regular (typical)
    78: "df71d3d3fd2064c8",  # bfloat16 adversarial:ties (typical)
}


@pytest.fixture
def op(make_project):
    return load_config(make_project(CONFIG)).op("mix")


def build_case(op, seed, root):
    """The case as the workers build it (their loader imports inputs hooks)."""
    return build_with(op, seed, root, load=load_callable)


def digest(case) -> str:
    h = hashlib.sha256()
    for name, array in case.logical.items():
        h.update(name.encode())
        h.update(str(array.dtype).encode())
        h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()[:16]


def test_pinned_input_hashes(op, tmp_path):
    cases = plan_op(op, 1234, op.dtypes, 16)
    got = {i: digest(build_case(op, cases[i].seed, tmp_path)) for i in PINNED}
    assert got == PINNED


def test_a_seed_alone_replays_byte_identical_inputs(op, tmp_path):
    for ref in plan_op(op, 99, op.dtypes, 4):
        first, again = build_case(op, ref.seed, tmp_path), build_case(op, ref.seed, tmp_path)
        assert digest(first) == digest(again)
        for name in first.arrays:
            assert first.arrays[name].strides == again.arrays[name].strides
            assert np.array_equal(first.arrays[name], again.arrays[name], equal_nan=True)


def test_quick_plan_covers_every_mode_and_size_class_per_dtype(op):
    cases = plan_op(op, 5, ("float32",), 16)
    strata = [stratum(op, c.seed) for c in cases]
    assert {s.dtype for s in strata} == {"float32"}
    assert len({c.index for c in cases}) == 16  # distinct iterations
    assert {s.mode for s in strata} == set(ValueMode) - {ValueMode.CAPTURED}  # captured: corpus cases only
    for size_class in (
        SizeClass.TYPICAL,
        SizeClass.BOUNDARY,
        SizeClass.TILE,
    ):  # each with both layout classes
        assert {s.contiguous for s in strata if s.size_class is size_class} == {True, False}
    # The rounding-bias test needs regular values on contiguous inputs of typical and tile sizes.
    assert {(s.size_class, s.contiguous) for s in strata if s.mode is ValueMode.REGULAR} >= {
        (SizeClass.TYPICAL, True),
        (SizeClass.TILE, True),
    }
    thorough = [stratum(op, c.seed) for c in plan_op(op, 5, ("float32",), SLOTS)]
    for mode in set(ValueMode) - {ValueMode.CAPTURED}:  # the full table pairs each mode with the size classes
        assert len({s.size_class for s in thorough if s.mode is mode}) >= 2, mode


def test_the_quick_suite_runs_every_dtype_the_first_in_full(op):
    """16 slots for the first dtype, the first 8 for each further one: the dtype-borne triggers (typical and
    tile rows of regular values, underflow and zero rows) are among them."""
    cases = plan_op(op, 5, ("float32", "bfloat16", "float16"), 16, extra_iterations=8)
    by_dtype: dict[str, list] = {}
    for c in cases:
        by_dtype.setdefault(stratum(op, c.seed).dtype, []).append(stratum(op, c.seed))
    assert {d: len(s) for d, s in by_dtype.items()} == {"float32": 16, "bfloat16": 8, "float16": 8}
    for strata in (by_dtype["bfloat16"], by_dtype["float16"]):
        assert {(s.mode, s.size_class, s.contiguous) for s in strata} >= {
            (ValueMode.REGULAR, SizeClass.TYPICAL, True),
            (ValueMode.REGULAR, SizeClass.TILE, True),
            (ValueMode.UNDERFLOW_ROWS, SizeClass.TILE, True),
            (ValueMode.ZERO_ROWS, SizeClass.BOUNDARY, False),
        }
    assert len(plan_op(op, 5, ("float32", "bfloat16"), 16)) == 32  # without extra_iterations: 16 each


def test_every_dim_hits_a_tile_multiple_and_a_non_multiple(op, tmp_path):
    cases = [build_case(op, c.seed, tmp_path) for c in plan_op(op, 11, ("float32",), 16)]
    for dim in ("M", "K"):
        sizes = {c.dims[dim] for c in cases}
        assert any(s % 16 == 0 for s in sizes) and any(s % 16 for s in sizes), (dim, sizes)


def test_shared_dims_are_consistent_and_indices_bounded(op, tmp_path):
    for ref in plan_op(op, 3, ("float32", "float16"), 8):
        case = build_case(op, ref.seed, tmp_path)
        assert case.arrays["a"].shape[1] == case.arrays["b"].shape[0] == case.dims["K"]
        ids = case.logical["ids"]
        assert ids.dtype == np.int64 and ids.min() >= 0 and ids.max() < case.dims["N"]


def test_dtypes_round_to_nearest_even(op, tmp_path):
    import ml_dtypes

    for ref in plan_op(op, 8, ("bfloat16", "float16"), 3):
        case = build_case(op, ref.seed, tmp_path)
        expected = {"bfloat16": np.dtype(ml_dtypes.bfloat16), "float16": np.dtype(np.float16)}[case.dtype]
        assert case.logical["a"].dtype == expected


def test_layouts_are_real_memory_with_poisoned_gaps():
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    strided = layout_mod.materialize(values, layout_mod.LayoutChoice(Layout.STRIDED))
    assert np.array_equal(strided, values) and not strided.flags.c_contiguous
    base = strided.base
    assert base is not None
    while base.base is not None:
        base = base.base
    assert np.isnan(base).sum() == base.size - values.size  # every gap holds NaN
    transposed = layout_mod.materialize(values, layout_mod.LayoutChoice(Layout.TRANSPOSED))
    assert np.array_equal(transposed, values) and transposed.strides == (4, 12)
    choice = layout_mod.LayoutChoice(Layout.BROADCAST, broadcast_dim=0)
    broadcast = layout_mod.materialize(layout_mod.broadcast_source(values, choice), choice)
    assert broadcast.strides[0] == 0 and np.array_equal(broadcast[2], values[0])
    odd = layout_mod.materialize(values[:1], layout_mod.LayoutChoice(Layout.ODD_SIZE1))
    assert odd.strides[0] == layout_mod.ODD_STRIDE_ELEMENTS * 4 and np.array_equal(odd, values[:1])
    wide = np.arange(3 * 70, dtype=np.float32).reshape(3, 70)
    for rows in (values, wide):  # a slice x[:, :N] of a wider buffer: inner stride 1, padding poisoned
        padded = layout_mod.materialize(rows, layout_mod.LayoutChoice(Layout.ROW_PADDED))
        n = rows.shape[1]
        assert np.array_equal(padded, rows) and padded.strides == (layout_mod.row_stride(n) * 4, 4)
        assert layout_mod.row_stride(n) > n
        assert padded.base is not None and np.isnan(padded.base).sum() == padded.base.size - rows.size
    assert layout_mod.row_stride(70) == 128 and layout_mod.row_stride(4) == 9


def test_an_op_that_ignores_strides_is_wrong_under_fuzzed_layouts(op, tmp_path):
    """Reading memory as if contiguous gives different values for every non-contiguous layout used."""
    wrong = 0
    for ref in plan_op(op, 2, ("float32",), 16):
        case = build_case(op, ref.seed, tmp_path)
        a = case.arrays["a"]
        if a.flags.c_contiguous or a.size < 2:
            continue
        naive = np.lib.stride_tricks.as_strided(a, a.shape, (a.shape[1] * a.itemsize, a.itemsize))
        wrong += not np.array_equal(naive, case.logical["a"], equal_nan=True)
    assert wrong >= 4


def test_values_use_no_libm(op):
    """The generator may only use exact arithmetic; a guard against someone adding exp/log/cos."""
    source = (Path(__file__).parents[2] / "gpuemu_ci" / "fuzz" / "values.py").read_text()
    for call in ("np.exp(", "np.log(", "np.cos(", "np.sin(", "np.sqrt(", "math."):
        assert call not in source


def test_nonfinite_values_only_when_declared(make_project, tmp_path):
    config = load_config(
        make_project(CONFIG.replace('family = "matmul"', 'family = "matmul"\nnonfinite = "propagate"'))
    )
    plain = load_config(make_project(CONFIG)).op("mix")
    propagating = config.op("mix")
    seen_plain = seen_nonfinite = 0
    for ref in plan_op(plain, 4, ("float32",), 16):
        for case, counter in (
            (build_case(plain, ref.seed, tmp_path), "plain"),
            (build_case(propagating, ref.seed, tmp_path), "nf"),
        ):
            bad = sum(int((~np.isfinite(a)).sum()) for a in case.logical.values() if a.dtype.kind == "f")
            if counter == "plain":
                seen_plain += bad
            else:
                seen_nonfinite += bad
    assert seen_plain == 0 and seen_nonfinite > 0


KINDS = """
[validation]
dtypes = ["float32"]
[[ops]]
name = "kinds"
op = "m:f"
reference = "m:f"
family = "exact"
constraints = ["D % 2 == 0", "R <= D"]
[ops.dims]
B = [4, 16]
D = { min = 1, max = 64, typical = [32] }
R = { min = 1, max = 64, typical = [8] }
V = [100]
[ops.inputs]
p = { dims = ["B", "D"], kind = "probabilities" }
logp = { dims = ["B", "D"], kind = "log_probabilities" }
ids = { dims = ["B"], dtype = "int64", kind = "index", high = "V", ignore_value = -100 }
offsets = { dims = ["B"], dtype = "int32", kind = "sorted_offsets", high = "V" }
w = { dims = ["D"], kind = "affine_weight" }
"""


def test_value_kinds_and_constraints(make_project, tmp_path):
    op = load_config(make_project(KINDS)).op("kinds")
    last_is_total = ignored = 0
    for ref in plan_op(op, 21, ("float32",), 16):
        case = build_case(op, ref.seed, tmp_path)
        assert case.dims["D"] % 2 == 0 and case.dims["R"] <= case.dims["D"]
        assert np.allclose(case.logical["p"].sum(axis=-1), 1.0, atol=1e-5)
        logp = case.logical["logp"].astype(np.float64)
        assert np.allclose(np.exp(logp).sum(axis=-1), 1.0, atol=1e-5)  # exactly dyadic before rounding
        ids = case.logical["ids"]
        assert set(np.unique(ids[ids != -100])) <= set(range(case.dims["V"]))
        offsets = case.logical["offsets"]
        assert offsets[0] == 0 and (np.diff(offsets) >= 0).all() and offsets[-1] <= case.dims["V"]
        if case.layouts["offsets"].layout is not Layout.BROADCAST and offsets.size >= 2:
            last_is_total += int(offsets[-1] == case.dims["V"])
        if case.layouts["ids"].layout is not Layout.BROADCAST and ids.size >= 2:
            assert ids[0] == 0 and ids[-1] == case.dims["V"] - 1  # the first and last rows of the table
        ignored += int((ids == -100).sum())
        assert (np.abs(case.logical["w"] - 1) <= 0.1).all()
    assert 0 < last_is_total < 16 and ignored > 0


def test_inputs_hook_is_replayable_from_the_seed(make_project, tmp_path):
    config = load_config(
        make_project(
            """
        [[ops]]
        name = "hooked"
        op = "h:f"
        reference = "h:f"
        family = "exact"
        inputs = "h:make_inputs"
        [ops.dims]
        N = [8, 32]
    """,
            {
                "h.py": """
        import numpy as np
        def make_inputs(rng, dims, dtype, kwargs):
            n = dims["N"]
            return {"x": (rng.u64_array(n) % 7).astype(dtype), "y": np.arange(n, dtype=dtype)}
        def f(x, y):
            return x + y
    """
            },
        )
    )
    op = config.op("hooked")
    ref = plan_op(op, 5, op.dtypes, 1)[0]
    first, again = build_case(op, ref.seed, config.root), build_case(op, ref.seed, config.root)
    assert list(first.logical) == ["x", "y"] and first.logical["x"].shape == (first.dims["N"],)
    assert digest(first) == digest(again)


ROWS = """
[validation]
dtypes = ["float32", "float16", "bfloat16"]
[[ops]]
name = "rows"
op = "m:f"
reference = "m:f"
family = "softmax"
[ops.dims]
M = [6, 12]
N = [40]
[ops.inputs]
x = ["M", "N"]
w = ["N"]
"""


def test_zero_and_underflow_rows(make_project, tmp_path):
    """Rows of zeros (an ignored eps divides by 0) and rows below exp's underflow (a max initialised to 0
    leaves every exp at 0) come deterministically; 1-D weights keep regular values."""
    op = load_config(make_project(ROWS)).op("rows")
    seen = {ValueMode.ZERO_ROWS: 0, ValueMode.UNDERFLOW_ROWS: 0}
    floors = {"float32": 110.0, "bfloat16": 110.0, "float16": 20.0}
    for ref in plan_op(op, 3, op.dtypes, 16):
        case = build_case(op, ref.seed, tmp_path)
        mode = case.stratum.mode
        if mode not in seen or case.layouts["x"].layout is Layout.BROADCAST or case.dims["M"] < 2:
            continue
        seen[mode] += 1
        x = case.logical["x"].astype(np.float64)
        w = case.logical["w"].astype(np.float64)
        if mode is ValueMode.ZERO_ROWS:
            assert (x[::3] == 0).all() and (x[1::3] != 0).any()
        else:
            assert (x[::2].max(axis=-1) <= -floors[case.dtype]).all() and (x[1::2] > -10).all()
            assert np.exp(x[::2].astype(case.logical["x"].dtype)).max() == 0  # exp underflows in the dtype
        assert np.abs(w).max() < 10  # weights stay ordinary
    assert all(count >= 2 for count in seen.values()), seen


ROPE = """
[validation]
dtypes = ["float32"]
[[ops]]
name = "rope"
op = "m:f"
reference = "m:f"
family = "elementwise"
layouts = ["contiguous"]
[ops.dims]
B = [2]
S = { min = 1, max = 64, typical = [16] }
D = { min = 2, max = 64, typical = [8] }
[ops.inputs]
cos = { dims = ["B", "S", "D"], kind = "cos" }
sin = { dims = ["B", "S", "D"], kind = "sin" }
"""


def test_rotary_tables_share_their_angles(make_project, tmp_path):
    op = load_config(make_project(ROPE)).op("rope")
    for ref in plan_op(op, 4, op.dtypes, 16):
        case = build_case(op, ref.seed, tmp_path)
        c, s_ = case.logical["cos"].astype(np.float64), case.logical["sin"].astype(np.float64)
        d = case.dims["D"]
        np.testing.assert_allclose(c * c + s_ * s_, 1.0, atol=1e-6)  # one angle per (position, frequency)
        half = d // 2
        assert np.array_equal(c[..., :half], c[..., half : 2 * half])  # halves repeated: cat(f, f)
        if d % 2:
            assert (c[..., -1] == 1).all() and (s_[..., -1] == 0).all()  # an odd last lane is not rotated
        assert (c[:, 0] == 1).all() and (s_[:, 0] == 0).all()  # position 0: angle 0
        if case.dims["S"] > 1:
            assert len(np.unique(np.round(c[:, 1:], 6))) > 1


def test_inputs_hook_gets_the_value_mode_and_a_generator(make_project, tmp_path):
    config = load_config(
        make_project(
            """
        [validation]
        dtypes = ["float32", "bfloat16"]
        [[ops]]
        name = "hooked"
        op = "hmode:f"
        reference = "hmode:f"
        family = "norm"
        inputs_hook = "hmode:make_inputs"
        [ops.dims]
        M = [8, 32]
        N = { min = 1, max = 300, typical = [64] }
        [ops.inputs]
        x = ["M", "N"]
        w = ["N"]
    """,
            {
                "hmode.py": """
        def make_inputs(rng, dims, dtype, kwargs, mode, generate):
            x = generate((dims["M"], dims["N"]))
            w = generate((dims["N"],), kind="affine_weight")
            return {"x": x, "w": w, "mode": generate((1,), "int32", "index", high=9)}
        def f(x, w, mode):
            return x
    """
            },
        )
    )
    op = config.op("hooked")
    modes, non_contiguous = set(), 0
    for ref in plan_op(op, 8, op.dtypes, 16):
        case = build_case(op, ref.seed, config.root)
        again = build_case(op, ref.seed, config.root)
        assert digest(case) == digest(again)
        x = case.logical["x"].astype(np.float64)
        assert case.logical["x"].dtype == np.dtype(
            ml_dtypes.bfloat16 if case.dtype == "bfloat16" else np.float32
        )
        if case.stratum.mode is ValueMode.OFFSET and case.layouts["x"].layout is not Layout.BROADCAST:
            assert abs(x.mean()) > 50 * x.std()  # the hook's tensors follow the case's distribution
        if case.stratum.mode is ValueMode.ZERO_ROWS and case.layouts["x"].layout is not Layout.BROADCAST:
            assert (x[::3] == 0).all()
        modes.add(case.stratum.mode)
        non_contiguous += not case.arrays["x"].flags.c_contiguous  # layouts apply to what the hook returns
    assert len(modes) == len(ValueMode) - 1 and non_contiguous >= 4  # every mode but captured


def test_a_hook_that_returns_other_shapes_than_declared_is_a_config_error(make_project):
    from gpuemu_ci.errors import ConfigError

    config = load_config(
        make_project(
            """
        [[ops]]
        name = "hooked"
        op = "hshape:f"
        reference = "hshape:f"
        family = "elementwise"
        inputs_hook = "hshape:make_inputs"
        [ops.dims]
        N = [8]
        [ops.inputs]
        x = ["N"]
    """,
            {
                "hshape.py": "import numpy as np\n"
                "def make_inputs(rng, dims, dtype, kwargs):\n    return {'x': np.zeros(3)}\n"
            },
        )
    )
    op = config.op("hooked")
    with pytest.raises(
        ConfigError, match=r"returned `x` with shape \(3,\), but \[ops.inputs\] declares \['N'\] = \(8,\)"
    ):
        build_case(op, plan_op(op, 1, op.dtypes, 1)[0].seed, config.root)
