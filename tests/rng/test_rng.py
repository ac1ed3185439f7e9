"""The seeded generator: gpuemu's known answers, and the vectorised stream equal to the scalar one."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from gpuemu_ci.rng import SeededRng, derive_seed, splitmix64
from gpuemu_ci.rng import xorshift as rng_module
from gpuemu_ci.rng.jump import Gf2Map, PowerCache, lane_starts

MASK = (1 << 64) - 1
REF_SEED = 42
REF_LEN = 1_000_000


def spec_stream(s0: int, s1: int, count: int) -> tuple[list[int], list[int]]:
    """The generator written out from its definition: outputs and the word sequence z (state k is (z[k], z[k+1]))."""
    outs: list[int] = []
    z = [s0, s1]
    for _ in range(count):
        x, y = s0, s1
        s0 = y
        x ^= (x << 23) & MASK
        x ^= x >> 17
        x ^= y ^ (y >> 26)
        s1 = x ^ y
        outs.append((x + y) & MASK)
        z.append(s1)
    return outs, z


@pytest.fixture(scope="module")
def reference() -> tuple[np.ndarray, np.ndarray]:
    """10^6 outputs of SeededRng(42) and every state along the way, from the spec alone."""
    start = SeededRng(REF_SEED).state
    outs, z = spec_stream(start[0], start[1], REF_LEN)
    return np.array(outs, dtype=np.uint64), np.array(z, dtype=np.uint64)


# -- known answers (gpuemu's published generator) --------------------------------------------------------------


def test_splitmix64_known_answers() -> None:
    assert splitmix64(0) == 16294208416658607535
    assert splitmix64(42) == 13679457532755275413
    assert splitmix64(43) == 13432527470776545160


def test_derive_seed_known_answers() -> None:
    assert derive_seed(42, "test") == 11905773293262258603
    assert derive_seed(0, "") == 1786884285633530058
    assert derive_seed(12345, "iter_0") == 13013218331088976615
    assert derive_seed(13013218331088976615, "data") == 1832811693103319214


def test_seeding_is_splitmix_of_seed_and_seed_plus_one() -> None:
    assert SeededRng(42).state == (13679457532755275413, 13432527470776545160)
    assert SeededRng(42).seed == 42


def test_first_five_outputs_of_seed_42() -> None:
    r = SeededRng(42)
    assert [r.gen_u64() for _ in range(5)] == [
        14921385303349856026,
        836881716698787820,
        2679325795615653720,
        15230690181549778750,
        17419016854217654406,
    ]


def test_float_draws_of_seed_42() -> None:
    r = SeededRng(42)
    assert r.gen_f64() == 0.8088899181192595
    assert r.gen_f64() == 0.0453674487679111
    assert SeededRng(42).gen_f32() == 0.8088898658752441
    assert float(np.float32(SeededRng(42).gen_f32())) == SeededRng(42).gen_f32()  # exactly an f32


def test_derive_known_answer() -> None:
    assert SeededRng(42).derive("shape").gen_u64() == 7197419749763921599


@pytest.mark.parametrize(
    ("index", "seed", "dtype", "layout", "shape", "first"),
    [
        (
            0,
            13013218331088976615,
            "float32",
            "Strided",
            [2, 64, 768],
            [-3.0967888832092285, -2.9083023071289062],
        ),
        (1, 9032561507405567678, "float16", "Transposed", [4, 256, 1024], None),
        (2, 17590837288749205007, "float16", "Contiguous", [2, 128, 512], None),
    ],
)
def test_upstream_fuzzer_iterations_master_12345(
    index: int, seed: int, dtype: str, layout: str, shape: list[int], first: list[float] | None
) -> None:
    """Seed tree of the upstream fuzzer (default config: dtypes [f32, f16], layouts [C, S, T])."""
    assert derive_seed(12345, f"iter_{index}") == seed
    it = SeededRng(seed)
    assert it.derive("dtype").choice(["float32", "float16"]) == dtype
    assert it.derive("layout").choice(["Contiguous", "Strided", "Transposed"]) == layout
    s = it.derive("shape")
    assert s.gen_bool(0.1) is False  # not an edge case; the draw is consumed either way
    assert [s.choice([1, 2, 4, 8]), s.choice([64, 128, 256, 512]), s.choice([512, 768, 1024])] == shape
    if first is not None:
        data = it.derive("data").derive("input_0")
        assert [float(np.float32((data.gen_f64() * 2 - 1) * 10)) for _ in first] == first


def test_upstream_matmul_schema_iterations_master_2024() -> None:
    dims = {"M": [1, 2, 7, 31, 128, 257], "K": [1, 3, 16, 127, 256], "N": [1, 2, 15, 64, 255]}
    expected = [
        (8963113779050129553, "float16", "Transposed", {"M": 128, "K": 1, "N": 64}),
        (1194553877950058243, "float32", "Strided", {"M": 2, "K": 256, "N": 64}),
    ]
    for index, (seed, dtype, layout, dim_values) in enumerate(expected):
        assert derive_seed(2024, f"iter_{index}") == seed
        it = SeededRng(seed)
        assert it.derive("dtype").choice(["float32", "float16"]) == dtype
        assert it.derive("layout").choice(["Contiguous", "Strided", "Transposed"]) == layout
        shape_rng = it.derive("shape")
        assert {name: shape_rng.derive(name).choice(c) for name, c in dims.items()} == dim_values
    a = SeededRng(1194553877950058243).derive("data").derive("input_0")
    assert [float(np.float32((a.gen_f64() * 2 - 1) * 10)) for _ in range(2)] == [
        -1.050864577293396,
        9.69424057006836,
    ]


def test_upstream_int32_values_use_gen_range() -> None:
    seed = derive_seed(1, "iter_0")
    assert seed == 13689511901968615685
    data = SeededRng(seed).derive("data").derive("input_0")
    assert [data.gen_range(0, 200) - 100 for _ in range(4)] == [-34, 31, 30, 35]


# -- scalar draws ---------------------------------------------------------------------------------------


def test_choice_index_and_gen_bool_consume_one_output_each() -> None:
    r = SeededRng(42)
    assert r.choice_index(1000) == 14921385303349856026 % 1000
    assert r.gen_bool(1.0) is True
    assert r.gen_bool(0.0) is False
    assert r.gen_u64() == 15230690181549778750  # the fourth output: exactly three were consumed


def test_shuffle_is_fisher_yates_from_the_end() -> None:
    # With outputs u1..u4 of seed 42: swap(4, u1 % 5 = 1), swap(3, u2 % 4 = 0), swap(2, u3 % 3 = 0),
    # swap(1, u4 % 2 = 0): [0,1,2,3,4] -> [0,4,2,3,1] -> [3,4,2,0,1] -> [2,4,3,0,1] -> [4,2,3,0,1].
    items = [0, 1, 2, 3, 4]
    SeededRng(42).shuffle(items)
    assert items == [4, 2, 3, 0, 1]


def test_derive_depends_on_seed_not_state() -> None:
    r = SeededRng(7)
    before = r.derive("data").gen_u64()
    for _ in range(10):
        r.gen_u64()
    assert r.derive("data").gen_u64() == before
    assert r.derive("dtype").gen_u64() != before
    assert r.derive("data").seed == derive_seed(7, "data")


def test_copy_is_independent_and_equal() -> None:
    r = SeededRng(3)
    r.gen_u64()
    c = r.copy()
    assert c == r and copy.copy(r) == r and copy.deepcopy(r) == r
    assert c.gen_u64() == r.gen_u64()
    c.gen_u64()
    assert c != r
    restored = SeededRng.from_state(3, r.state)
    assert restored.gen_u64() == r.gen_u64()


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: SeededRng(-1), ValueError),
        (lambda: SeededRng(1 << 64), ValueError),
        (lambda: SeededRng(1.5), TypeError),  # type: ignore[arg-type]
        (lambda: SeededRng(True), TypeError),
        (lambda: derive_seed(1, b"x"), TypeError),  # type: ignore[arg-type]
        (lambda: SeededRng(1).u64_array(-1), ValueError),
        (lambda: SeededRng(1).u64_array(2.0), TypeError),  # type: ignore[arg-type]
        (lambda: SeededRng(1).choice([]), ValueError),
        (lambda: SeededRng(1).gen_range(5, 5), ValueError),
        (lambda: SeededRng(1).choice_index(0), ValueError),
        (lambda: SeededRng.from_state(1, (0, 0)), ValueError),
    ],
)
def test_bad_arguments_are_rejected(call: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        call()  # type: ignore[operator]


def test_numpy_integers_are_accepted_as_seeds() -> None:
    assert SeededRng(np.uint64(42)).gen_u64() == 14921385303349856026  # type: ignore[arg-type]  # NumPy ints work too


# -- u64_array: the vectorised stream is the scalar stream -----------------------------------------------


def _lane_boundary_sizes() -> list[int]:
    """Sizes whose last lane ends at or around a lane or block boundary of the vectorised path, whatever its
    tuning (the plan is re-derived for every size, so each size really has the tail it was chosen for)."""
    block = rng_module._BLOCK_STEPS
    sizes = set()
    for base in (2 * rng_module._VECTOR_MIN, 5_000, 20_000, 70_000, 300_000, 900_000):
        m = 1 << rng_module._log2_lane_length(base)
        lanes = base // m
        tails = {1, 2, m // 2, m - 1, m, block - 1, block, block + 1, 2 * block + 1}
        for tail in tails:
            size = (lanes - 1) * m + tail
            if 0 < tail <= m and 1 << rng_module._log2_lane_length(size) == m:
                sizes.add(size)
    return sorted(size for size in sizes if size <= REF_LEN)


SIZES = sorted(
    {0, 1, 2, 3, 63, 64, 65, rng_module._VECTOR_MIN - 1, 7_919, 8_191, 8_192, 8_193, 65_537, 104_729}
    | {999_983, REF_LEN}
    | set(_lane_boundary_sizes())
)


@pytest.mark.slow
@pytest.mark.parametrize("n", SIZES)
def test_u64_array_equals_spec_stream_and_state(n: int, reference: tuple[np.ndarray, np.ndarray]) -> None:
    outs, z = reference
    r = SeededRng(REF_SEED)
    got = r.u64_array(n)
    assert got.dtype == np.uint64 and got.shape == (n,)
    np.testing.assert_array_equal(got, outs[:n])
    assert r.state == (int(z[n]), int(z[n + 1]))


def test_u64_array_calls_chain_and_mix_with_scalar_draws(reference: tuple[np.ndarray, np.ndarray]) -> None:
    outs, z = reference
    r = SeededRng(REF_SEED)
    pieces = [r.u64_array(10_007), np.array([r.gen_u64()], dtype=np.uint64), r.u64_array(123_457)]
    pieces.append(r.u64_array(3))
    total = sum(len(p) for p in pieces)
    np.testing.assert_array_equal(np.concatenate(pieces), outs[:total])
    assert r.state == (int(z[total]), int(z[total + 1]))


@pytest.mark.parametrize("seed", [0, 1, 12345, MASK])
def test_u64_array_matches_gen_u64_loop_for_other_seeds(seed: int) -> None:
    fast, slow = SeededRng(seed), SeededRng(seed)
    got = fast.u64_array(20_001)
    np.testing.assert_array_equal(got, np.array([slow.gen_u64() for _ in range(20_001)], dtype=np.uint64))
    assert fast.state == slow.state
    assert fast.gen_u64() == slow.gen_u64()


def test_f64_array_matches_gen_f64() -> None:
    fast, slow = SeededRng(9), SeededRng(9)
    got = fast.f64_array(5_000)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, np.array([slow.gen_f64() for _ in range(5_000)]))
    assert fast.state == slow.state


@pytest.mark.parametrize("n", [0, 5, 63, 64, 1_000, 123_456])
def test_advance_skips_exactly_n_outputs(n: int, reference: tuple[np.ndarray, np.ndarray]) -> None:
    outs, z = reference
    r = SeededRng(REF_SEED)
    r.advance(n)
    assert r.state == (int(z[n]), int(z[n + 1]))
    assert r.gen_u64() == int(outs[n])


# -- jump-ahead building blocks --------------------------------------------------------------------------


def _step(s0: int, s1: int) -> tuple[int, int]:
    x = s0 ^ ((s0 << 23) & MASK)
    x ^= x >> 17
    return s1, x ^ (s1 >> 26)


def test_gf2_map_of_a_step_applies_the_step() -> None:
    step = Gf2Map.from_step(_step)
    states = np.array(
        [[1, 0], [0, 1 << 63], [0xDEADBEEF, 0x12345678_9ABCDEF0], [MASK, MASK]], dtype=np.uint64
    )
    got = step.apply(states)
    for row, (s0, s1) in zip(got, states.tolist(), strict=True):
        assert (int(row[0]), int(row[1])) == _step(s0, s1)
    identity = Gf2Map.identity()
    np.testing.assert_array_equal(identity.apply(states), states)
    np.testing.assert_array_equal(identity.then(step).apply(states), got)


def test_power_cache_and_lane_starts_agree_with_stepping() -> None:
    cache = PowerCache(_step)
    _, z = spec_stream(5, 7, 4 * 37)
    assert cache.jump(5, 7, 0) == (5, 7)
    assert cache.jump(5, 7, 37) == (z[37], z[38])
    starts = lane_starts(cache, 5, 7, 2, 37)  # 37 lanes, 4 steps apart
    assert [tuple(int(v) for v in row) for row in starts] == [(z[4 * j], z[4 * j + 1]) for j in range(37)]
    with pytest.raises(ValueError):
        cache.jump(5, 7, -1)
