"""bfloat16 and fp8 as the GPU rounds them (gpuemu_ci/triton_cpu/lowp.py), against torch's conversions, which
round to nearest even like the NVIDIA backend's `cvt.rn` (torch does not saturate fp8: the expected values
clip to the largest finite value first, as `cvt.rn.satfinite` does)."""

from __future__ import annotations

import numpy as np
import pytest

from gpuemu_ci.triton_cpu import lowp

torch = pytest.importorskip("torch")

BF16 = lowp.TYPES["bf16"]
E4M3 = lowp.TYPES["fp8e4nv"]
E5M2 = lowp.TYPES["fp8e5"]


def _edge_values() -> np.ndarray:
    rng = np.random.default_rng(7)
    specials = [1.01171875, 1.00390721, 3.14, 1.998046875, 65504.0, 2.0**-130, 2.0**-149, -1e-39, 1e-8,
                0.0, -0.0, np.inf, -np.inf, 3.3895314e38, 448.0, 464.0, 480.0, 57344.0, 61440.0, 1e6]  # fmt: skip
    randoms = np.concatenate(
        [rng.standard_normal(20000), rng.standard_normal(2000) * 1e-36, rng.uniform(-600, 600, 4000)]
    )
    return np.concatenate([np.array(specials), randoms]).astype(np.float32)


def _bits(values: np.ndarray) -> np.ndarray:
    return values.view(np.uint8 if values.dtype.itemsize == 1 else np.uint16)


def test_fp32_to_bf16_rounds_to_nearest_even_like_torch_subnormals_included() -> None:
    x = _edge_values()
    got = lowp.convert(x, BF16)
    want = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(_bits(got), want)


@pytest.mark.parametrize(
    ("ours", "theirs", "limit"), [(E4M3, "float8_e4m3fn", 448.0), (E5M2, "float8_e5m2", 57344.0)]
)
def test_fp32_to_fp8_rounds_to_nearest_even_and_saturates_like_cvt_rn_satfinite(
    ours: np.dtype, theirs: str, limit: float
) -> None:
    x = _edge_values()
    got = lowp.convert(x, ours)
    clipped = np.clip(x, -limit, limit)
    want = torch.from_numpy(clipped).to(getattr(torch, theirs)).view(torch.uint8).numpy()
    assert np.array_equal(_bits(got), want)
    assert float(lowp.convert(np.array([np.inf], np.float32), ours).astype(np.float32)[0]) == limit
    assert np.isnan(lowp.convert(np.array([np.nan], np.float32), ours).astype(np.float32)).all()


def test_a_double_is_rounded_once_not_through_fp32() -> None:
    """1 + 2^-8 + 2^-40 lies just above a tie of bf16: once rounded it goes up; rounded to fp32 first it
    would land on the tie and go to even (down)."""
    x = np.array([1 + 2.0**-8 + 2.0**-40, -(1 + 2.0**-8 + 2.0**-40), 1 + 2.0**-8], dtype=np.float64)
    got = lowp.convert(x, BF16).astype(np.float64)
    assert got.tolist() == [1 + 2.0**-7, -(1 + 2.0**-7), 1.0]
    assert lowp.from_python(1 + 2.0**-8 + 2.0**-40, BF16).astype(np.float64)[0] == 1 + 2.0**-7


def test_round_toward_zero_when_asked() -> None:
    x = np.array([1.999, -1.999, 3.4e38, np.inf, np.nan], dtype=np.float32)
    got = lowp.convert(x, BF16, "rtz").astype(np.float32)
    assert got[0] == np.float32(1.9921875) and got[1] == np.float32(-1.9921875)
    assert got[2] < 3.4e38 and np.isfinite(got[2]) and np.isinf(got[3]) and np.isnan(got[4])
    half = lowp.convert(np.array([1.0 + 2.0**-11 + 2.0**-20], dtype=np.float32), np.dtype(np.float16), "rtz")
    assert half.dtype == np.float16 and float(half[0]) == 1.0


def test_low_precision_values_widen_exactly() -> None:
    bits = np.arange(0, 2**16, dtype=np.uint16)
    wide = lowp.convert(bits.view(BF16), np.dtype(np.float32))
    want = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).float().numpy()
    assert np.array_equal(wide, want, equal_nan=True)


def test_sums_of_16_bit_floats_are_a_tree_rounded_at_each_level() -> None:
    """tl.sum keeps fp16/bf16 in their type; the GPU adds pairs lane i + lane i + half (a tree), so 4096
    ones sum exactly where a running bf16 sum sticks at 256."""
    ones = np.ones((2, 4096), dtype=BF16)
    assert lowp.block_sum(ones, 1, False).astype(np.float32).tolist() == [4096.0, 4096.0]
    assert float(np.cumsum(ones[0])[-1]) == 256.0  # what a sequential bf16 sum gives
    x = np.random.default_rng(1).standard_normal((3, 5, 37)).astype(np.float16)
    by_axis = lowp.block_sum(x, 1, True)
    assert by_axis.shape == (3, 1, 37) and by_axis.dtype == np.float16
    column = x[:, :, 4]
    assert np.array_equal(by_axis[:, 0, 4], lowp.block_sum(column, 1, False))
    whole = lowp.block_sum(x, None, False)
    assert whole.shape == () and whole == lowp.block_sum(x.reshape(1, -1), 1, False)[0]
    fp32 = np.random.default_rng(2).standard_normal(1000).astype(np.float32)
    assert lowp.block_sum(fp32, 0, False) == np.sum(fp32)  # fp32 as NumPy sums it


def test_max_of_low_precision_values_compares_their_values_and_ignores_nan_as_fp32_does() -> None:
    x = np.array([[-5.0, -2.0, np.nan, -3.0]], dtype=np.float32).astype(BF16)
    assert float(lowp.widened(np.nanmax)(x, axis=1)[0]) == -2.0
    assert int(lowp.widened(np.nanargmin)(x, axis=1)[0]) == 0


def test_fused_multiply_add_rounds_once() -> None:
    """(1 + 2^-4)^2 - 1 = 2^-3 + 2^-8 fits bf16; rounding the product first (a tie, to even) loses 2^-8."""
    x = np.array([1 + 2.0**-4], dtype=np.float32).astype(BF16)
    z = np.array([-1.0], dtype=np.float32).astype(BF16)
    assert float(lowp.fma(x, x, z, BF16)[0]) == 2.0**-3 + 2.0**-8
    assert float((x * x - z * z)[0]) == 2.0**-3  # two roundings
