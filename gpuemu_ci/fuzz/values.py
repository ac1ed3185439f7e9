"""Input values from the seed stream with IEEE basic arithmetic only (+ - * /, exact scaling, sorting and
correctly rounded casts): no libm calls, so the same seed gives the same bytes on every machine and NumPy.

fp16 and bf16 are produced by round-to-nearest-even casts from float64 (NumPy and ml_dtypes); upstream truncated
fp16 and wrote fp16 bits into bf16 (research gpuemu-upstream.md §4.1). Both fixes are deliberate and versioned by
GENERATOR_VERSION.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.config.dimgraph import integer_value
from gpuemu_ci.config.model import InputSpec, NonFinite, ValueKind
from gpuemu_ci.plan.model import ValueMode
from gpuemu_ci.rng import SeededRng

# 4: size classes (typical sizes as declared, tile ladders, large sizes), zero and underflow rows, rotary
# cos/sin tables, pairwise kwargs, the row-padded layout, and inputs over 2^24 elements built from a repeated
# block (see docs/how-it-decides.md, "Determinism and replay").
# 5: dims a function of the seed alone: equal dims shrunk by the element cap in declaration order (was: string
# hash order), large cases sized without reading the machine's free memory (variant 1 now crosses 2^31 bytes).
# 6: the tile rung of the row dims counts per dtype, so every dtype row of the quick suite draws each row dim at
# its declared max (issue #32).
# 7: every varying dim, not only the row dims, at its declared max in its tile case of each dtype, the element cap
# shrinking it last, and more tile cases where a dtype has fewer than the op has such dims (issue #44).
GENERATOR_VERSION = "7"

TWO_POW_53 = float(2**53)
LN2 = 0.6931471805599453  # a literal: log-probabilities are -k * ln 2 for dyadic probabilities
# Centre of the "mean >> std" adversarial inputs, per dtype: large against a unit spread, small enough that the
# dtype still resolves the spread.
OFFSETS = {"float64": 2.0**12, "float32": 2.0**10, "float16": 2.0**8, "bfloat16": 2.0**7}
# Magnitudes just under exp overflow of each dtype (exp(x) overflows at 11.09 / 88.72 / 709.78).
NEAR_EXP_OVERFLOW = {"float64": 700.0, "float32": 87.0, "float16": 10.5, "bfloat16": 87.0}
# Exponent spread for the wide-dynamic-range inputs.
WIDE_EXPONENT = {"float64": 40, "float32": 20, "float16": 6, "bfloat16": 20}
TAME_OFFSET = 4.0
TAME_EXPONENT = 3
INT_RANGE = {True: (-100, 100), False: (0, 200)}  # signed, unsigned
# Magnitudes past which exp(-x) underflows to 0 in each dtype (its smallest subnormal is e^-744, e^-103.3,
# e^-16.6, e^-92): a row this negative has a softmax only when the max is subtracted first.
UNDERFLOW = {"float64": 760.0, "float32": 110.0, "float16": 20.0, "bfloat16": 110.0}
TAME_UNDERFLOW = 2.0
# Inputs with more elements than this repeat one block of about BLOCK values (a prime number of rows, or BLOCK
# values, so an offset that wraps by a power of two lands on other values): drawing 2^31 values one by one
# would take minutes and tens of GiB.
BLOCK_THRESHOLD = 1 << 24
BLOCK = 1_048_573


def unit_floats(rng: SeededRng, n: int) -> np.ndarray:
    """n floats in [0, 1) from the top 53 bits of each u64 (gen_f64's mapping, vectorised)."""
    return (rng.u64_array(n) >> np.uint64(11)).astype(np.float64) / TWO_POW_53


def regular(rng: SeededRng, n: int) -> np.ndarray:
    """Roughly N(0, 1): 2 * (u0 + u1 + u2 - 1.5), a sum of three uniforms, has mean 0 and variance 1.

    Two draws per element: u0 from the top 53 bits of the first (full double resolution), u1 and u2 from the
    two 32-bit halves of the second. The sum is formed exactly in integers (units of 2^-53) and rounded once.
    """
    if not n:
        return np.zeros(0)
    bits = rng.u64_array(2 * n)
    first, second = bits[:n], bits[n:]
    total = first >> np.uint64(11)
    total += (second >> np.uint64(32)) << np.uint64(21)
    second &= np.uint64(0xFFFFFFFF)
    second <<= np.uint64(21)
    total += second  # < 2^53 + 2 * 2^53: exact in uint64
    values = total.astype(np.float64)
    values *= 2.0**-52
    values -= 3.0
    return values


def generate(
    spec: InputSpec,
    shape: tuple[int, ...],
    dtype_name: str,
    mode: ValueMode,
    rng: SeededRng,
    dims: Mapping[str, int],
    nonfinite: NonFinite = NonFinite.NONE,
    tame: bool = False,
    shared: SeededRng | None = None,
    primary: bool = False,
) -> np.ndarray:
    """The logical (C-contiguous) input array, already rounded to its dtype.

    `tame` keeps magnitudes O(1) for ops whose exact result is ill-conditioned in its input scale (attention:
    fp32 score errors grow with |q||k| and flip the softmax at large magnitudes, so huge inputs would test the
    problem, not the kernel). `shared` is a stream every input of the case sees (rotary cos and sin tables draw
    their angles from it); `primary` marks the op's first input (its rows are the op's rows even when 1-D)."""
    info = dtypes.info(dtype_name)
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if n > BLOCK_THRESHOLD:
        block_shape = _block_shape(shape)
        block = generate(spec, block_shape, dtype_name, mode, rng, dims, nonfinite, tame, shared, primary)
        return np.resize(block.reshape(-1), n).reshape(shape)
    if spec.kind is not ValueKind.ANY:
        values = _kind_values(spec, shape, n, info, rng, dims, shared)
    elif info.is_float:
        values = _float_values(mode, shape, n, dtype_name, rng, nonfinite, tame, primary)
    else:
        values = _int_values(mode, n, info, rng)
    return np.asarray(values).reshape(shape).astype(info.numpy)


def _block_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The block a huge input repeats: whole rows (a prime number of them, so the period is no power of two)
    when rows are short enough, else BLOCK values."""
    last = shape[-1] if shape else 1
    if len(shape) >= 2 and 0 < 3 * last <= BLOCK:
        rows = BLOCK // last
        while rows > 2 and any(rows % q == 0 for q in range(2, int(rows**0.5) + 1)):
            rows -= 1
        return (rows, last)
    return (BLOCK,)


def _float_values(
    mode: ValueMode,
    shape: tuple[int, ...],
    n: int,
    dtype_name: str,
    rng: SeededRng,
    nonfinite: NonFinite,
    tame: bool,
    primary: bool = False,
) -> np.ndarray:
    base = regular(rng.derive("base"), n)
    if mode is ValueMode.REGULAR:
        return base
    if mode is ValueMode.BOUNDARY:
        return _boundary(base, dtype_name, rng.derive("special"), nonfinite, tame)
    if mode is ValueMode.OFFSET:
        sign = 1.0 if rng.derive("sign").gen_u64() & 1 else -1.0
        return sign * (TAME_OFFSET if tame else OFFSETS[dtype_name]) + base
    if mode is ValueMode.ASCENDING:
        np.abs(base, out=base)
        base.sort()  # global sort: every row ascending, later rows larger
        return base
    if mode is ValueMode.ALL_NEGATIVE:
        return -(np.abs(base) * 2.0 + 1.0)
    if mode is ValueMode.WIDE_RANGE:
        spread = TAME_EXPONENT if tame else WIDE_EXPONENT[dtype_name]
        exponents = (rng.derive("exponent").u64_array(n) % np.uint64(2 * spread + 1)).astype(
            np.int64
        ) - spread
        return np.ldexp(base, exponents.astype(np.int32))
    if mode is ValueMode.CANCELLATION:
        values = base.copy()
        pairs = n // 2
        jitter = regular(rng.derive("jitter"), pairs) * 2.0**-8
        values[1 : 2 * pairs : 2] = -values[0 : 2 * pairs : 2] * (1.0 + jitter)
        return values
    if mode is ValueMode.TIES:
        choices = np.array([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0])
        return choices[(rng.derive("ties").u64_array(n) % np.uint64(len(choices))).astype(np.int64)]
    if mode in (ValueMode.ZERO_ROWS, ValueMode.UNDERFLOW_ROWS):
        rows = _rows(base, shape, primary)
        if rows is None:
            return base
        if mode is ValueMode.ZERO_ROWS:
            rows[::3] = 0.0
        else:
            floor = TAME_UNDERFLOW if tame else UNDERFLOW[dtype_name]
            rows[::2] = -(floor + np.abs(rows[::2]))
        return base
    raise AssertionError(mode)


def _rows(values: np.ndarray, shape: tuple[int, ...], primary: bool) -> np.ndarray | None:
    """A (rows, last dim) view of `values` for the row modes; a 1-D input is one row when it is the op's first
    input (its rows are the op's), and is left alone otherwise (a weight or a bias)."""
    if not values.size or not shape:
        return None
    if len(shape) == 1:
        return values.reshape(1, -1) if primary else None
    return values.reshape(-1, shape[-1])


def _boundary(
    base: np.ndarray, dtype_name: str, rng: SeededRng, nonfinite: NonFinite, tame: bool
) -> np.ndarray:
    """7 of 16 elements become special values: signed zeros, subnormals, the smallest normal, large values,
    magnitudes near exp overflow, exact ties; NaN/Inf only where the op declares non-finite semantics."""
    info = dtypes.info(dtype_name)
    n = base.size
    bits = rng.u64_array(n)
    large = 2.0 ** (int(np.frexp(info.max_finite)[1]) // 4)  # frexp is exact; a quarter of the exponent range
    if tame:
        large = 4.0
    # Selector value k (the low 4 bits) < 7 picks special k = sign * (SCALE[k] * small + OFFSET[k]), small in
    # 1..4: signed zero, subnormals, the smallest normal, large values, near exp overflow, exact halves
    # (ties and duplicates), one. Every product here is exact, so only the chosen elements need computing.
    scale = np.array([0.0, info.min_subnormal, 0.0, large, 0.0, 0.5, 0.0])
    offset = np.array(
        [0.0, 0.0, info.min_normal, 0.0, 2.0 if tame else NEAR_EXP_OVERFLOW[dtype_name], 0.0, 1.0]
    )
    chosen = np.flatnonzero((bits & np.uint64(15)) < np.uint64(7))
    picked = bits[chosen]
    key = (picked & np.uint64(15)).astype(np.intp)
    small = ((picked >> np.uint64(5)) & np.uint64(3)).astype(np.float64) + 1.0
    special = scale[key] * small + offset[key]
    special[((picked >> np.uint64(4)) & np.uint64(1)).astype(np.bool_)] *= -1.0
    values = base  # a fresh array from `regular`
    values[chosen] = special
    if nonfinite is NonFinite.PROPAGATE:
        injected = ((bits >> np.uint64(8)) & np.uint64(63)).astype(np.int64)
        values[injected == 0] = np.nan
        values[injected == 1] = np.inf
        values[injected == 2] = -np.inf
    return values


def _int_values(mode: ValueMode, n: int, info: dtypes.DtypeInfo, rng: SeededRng) -> np.ndarray:
    if info.name == "bool":
        return (rng.u64_array(n) >> np.uint64(63)).astype(np.bool_)
    signed = np.issubdtype(info.numpy, np.signedinteger)
    low, high = INT_RANGE[signed]
    if mode is ValueMode.BOUNDARY:
        low, high = (-128, 128) if signed else (0, 256)
    elif mode is ValueMode.ALL_NEGATIVE and signed:
        low, high = -100, -1
    elif mode is ValueMode.TIES:
        low, high = (-2, 3) if signed else (0, 3)
    values = (rng.u64_array(n) % np.uint64(high - low)).astype(np.int64) + low
    if mode is ValueMode.ASCENDING:
        values = np.sort(values)
    return np.clip(values, int(np.iinfo(info.numpy).min), int(np.iinfo(info.numpy).max))


def _bound(value: int | str | None, dims: Mapping[str, int], default: int) -> int:
    """An input's `low`/`high`: a size, a dim name or an expression over dims."""
    if value is None:
        return default
    if isinstance(value, int):
        return value
    if value in dims:
        return dims[value]
    return integer_value(value, dims)


def _kind_values(
    spec: InputSpec,
    shape: tuple[int, ...],
    n: int,
    info: dtypes.DtypeInfo,
    rng: SeededRng,
    dims: Mapping[str, int],
    shared: SeededRng | None = None,
) -> np.ndarray:
    kind = spec.kind
    if kind is ValueKind.INDEX:
        low = _bound(spec.low, dims, 0)
        high = _bound(spec.high, dims, 1)
        span = max(high - low, 1)
        values = (rng.u64_array(n) % np.uint64(span)).astype(np.int64) + low
        if spec.ignore_value is not None and n:
            ignored = (rng.derive("ignore").u64_array(n) % np.uint64(8)) == 0
            values[ignored] = spec.ignore_value
        if n >= 2 and high > low:  # the first and last rows of a table are where offsets go wrong
            values[0], values[-1] = low, high - 1
        return values
    if kind in (ValueKind.COS, ValueKind.SIN):
        return _rotary(shape, shared or rng, kind is ValueKind.COS)
    if kind is ValueKind.SORTED_OFFSETS:
        # Bag offsets: sorted, the first 0, every one <= the total (`high`); in about half the cases the last is
        # the total itself (an empty last bag, or the include_last_offset convention).
        high = _bound(spec.high, dims, n)
        cuts = (
            np.sort((rng.u64_array(n) % np.uint64(high + 1)).astype(np.int64)) if n else np.zeros(0, np.int64)
        )
        if n:
            cuts[0] = 0
        if n >= 2 and rng.derive("last").gen_u64() & 1:
            cuts[-1] = high
        return cuts
    u = unit_floats(rng, n)
    if kind is ValueKind.POSITIVE:
        return u * 4.0 + 2.0**-4
    if kind is ValueKind.AFFINE_WEIGHT:
        return 1.0 + 0.2 * (u - 0.5)
    if kind is ValueKind.COS_SIN:
        return 2.0 * u - 1.0
    rows = shape[-1] if shape else 1
    if kind is ValueKind.PROBABILITIES:
        p = (u + 0.01).reshape(-1, rows) if n else u.reshape(0, max(rows, 1))
        return (p / p.sum(axis=1, keepdims=True)).reshape(-1)
    if kind is ValueKind.LOG_PROBABILITIES:
        return _dyadic_log_probabilities(rng, n, rows)
    raise AssertionError(kind)


def _dyadic_log_probabilities(rng: SeededRng, n: int, rows: int) -> np.ndarray:
    """Rows of log p with p = 2^-k summing to exactly 1: split a random leaf of a binary tree until the row
    is full, so log p = -k ln 2 needs no log call."""
    if n == 0 or rows == 0:
        return np.zeros(n)
    out = np.empty(n)
    picks = rng.u64_array(n)
    for start in range(0, n, rows):
        depths = [0]
        for j in range(1, rows):
            leaf = int(picks[start + j]) % len(depths)
            depths[leaf] += 1
            depths.append(depths[leaf])
        out[start : start + rows] = -LN2 * np.array(depths, dtype=np.float64)
    return out


def _rotary(shape: tuple[int, ...], rng: SeededRng, cos: bool) -> np.ndarray:
    """A rotary table: cos or sin of one angle per (position, frequency), the two halves of the last dim
    repeated (cos = cat(c, c), as `rotate_half` kernels expect), position 0 at angle 0. The angles come from
    `rng`, which the case's cos and sin inputs share, and t = tan(angle / 2) makes cos = (1 - t^2) / (1 + t^2)
    and sin = 2t / (1 + t^2) exact rational arithmetic (no libm), with cos^2 + sin^2 = 1 to rounding."""
    if not shape or 0 in shape:
        return np.zeros(shape)
    half = shape[-1] // 2
    angles_shape = (*shape[:-1], half)
    t = regular(rng.derive("rotary"), int(np.prod(angles_shape, dtype=np.int64))).reshape(angles_shape)
    if len(shape) >= 2:
        t[..., 0, :] = 0.0  # position 0: angle 0
    denominator = 1.0 + t * t
    value = (1.0 - t * t) / denominator if cos else 2.0 * t / denominator
    out = np.full(shape, 1.0 if cos else 0.0)  # an odd width leaves its last lane unrotated
    out[..., :half] = value
    out[..., half : 2 * half] = value
    return out
