"""Invariants declared per op, checked on every dtype (upstream skipped fp16/bf16, ignored no_nan/no_inf and
compared `shape_preserved` with the first input)."""

from __future__ import annotations

from math import sqrt

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.config.model import Invariants
from gpuemu_ci.oracle.model import Finding
from gpuemu_ci.results.model import FailureKind


def check_invariants(
    invariants: Invariants,
    output: np.ndarray,
    reference_shape: tuple[int, ...],
    output_dtype: str,
    c: float = 4.0,
) -> list[Finding]:
    """The declared invariants' findings on one output. `shape_preserved` is upstream's rule: the output has the
    shape of the reference's output (not of an input: a matmul's output never has its first input's shape)."""
    y = np.asarray(output)
    values = y.astype(np.float64)
    findings: list[Finding] = []

    def fail(name: str, text: str) -> None:
        findings.append(Finding(FailureKind.INVARIANT, f"invariant `{name}` violated: {text}"))

    if invariants.shape_preserved and tuple(y.shape) != tuple(reference_shape):
        fail("shape_preserved", f"output shape {tuple(y.shape)} != reference shape {tuple(reference_shape)}")
    if invariants.non_negative:
        negative = values < 0
        if negative.any():
            fail(
                "non_negative",
                f"{int(negative.sum())} negative elements, e.g. {values[negative].flat[0]:.6g}",
            )
    if invariants.finite and not np.isfinite(values).all():
        fail("finite", f"{int((~np.isfinite(values)).sum())} non-finite elements")
    if invariants.no_nan and np.isnan(values).any():
        fail("no_nan", f"{int(np.isnan(values).sum())} NaN elements")
    if invariants.no_inf and np.isinf(values).any():
        fail("no_inf", f"{int(np.isinf(values).sum())} infinite elements")
    if invariants.symmetric:
        if values.ndim < 2 or values.shape[-1] != values.shape[-2]:
            fail("symmetric", f"output shape {tuple(values.shape)} is not square in its last two dims")
        else:
            info = dtypes.info(output_dtype)
            u = info.unit_roundoff if info.is_float else 0.0
            transposed = np.swapaxes(values, -1, -2)
            allowed = c * 2.0 * u * np.maximum(np.abs(values), np.abs(transposed))
            asym = np.abs(values - transposed) > allowed
            asym &= np.isfinite(values) & np.isfinite(transposed)
            if asym.any():
                fail("symmetric", f"{int(asym.sum())} elements differ from their transpose")
    if invariants.normalized and values.size:
        info = dtypes.info(output_dtype)
        u_out = info.unit_roundoff if info.is_float else 0.0
        n = values.shape[-1] if values.ndim else 1
        sums = values.reshape(-1, n).sum(axis=1)
        tolerance = c * (n * u_out + sqrt(n) * dtypes.info("float32").unit_roundoff)
        off = np.abs(sums - 1.0) > tolerance
        if off.any():
            fail(
                "normalized",
                f"{int(off.sum())} of {off.size} rows do not sum to 1 (worst {sums[np.argmax(np.abs(sums - 1))]:.9g}"
                f", allowed ±{tolerance:.3g})",
            )
    return findings


# Below this mean excess (in ulps) a rounding bias is not reported, however significant: a truncating store is
# -0.5 ulp; a correct kernel's excess over RNE(r) is a few 1e-5 ulp (fp32 errors that cross a midpoint).
MIN_BIAS_ULP = 0.05


def bias_z(output: np.ndarray, reference: np.ndarray, output_dtype: str) -> float | None:
    """z-score of the mean signed excess of the output over the correctly rounded reference, RNE(r), in
    units of the output's spacing at the reference.

    A kernel that computes in fp32 and rounds to nearest even returns RNE(r) almost everywhere (0 when the mean
    excess is under MIN_BIAS_ULP); a truncating fp32 -> bf16 store is one ulp low on about half the elements,
    a bias that passes every elementwise tolerance. 16-bit outputs only."""
    if output_dtype not in ("float16", "bfloat16"):
        return None
    if not _rounded_from_accurate(np.asarray(output), np.asarray(reference, dtype=np.float64), output_dtype):
        return None
    y = np.asarray(output).astype(np.float64)
    r = np.asarray(reference, dtype=np.float64)
    # Groups whose values are exactly a shared factor's product, rounded once (RNE(r) itself among them), carry
    # the factor's lean, not a store's: they leave the test (as non-finite values do), and where too few values
    # remain to test, the output shows no store's bias.
    factored = _shared_factor_groups(y, r, output_dtype)
    z = _bias_z_of(np.where(factored, np.nan, y), r, output_dtype)
    return 0.0 if z is None and factored.any() else z


def _bias_z_of(y: np.ndarray, r: np.ndarray, output_dtype: str) -> float | None:
    by_rows = _row_bias_z(y, r, output_dtype)
    if by_rows is not None:
        return by_rows
    by_few_rows = _few_rows_bias_z(y, r, output_dtype)
    if by_few_rows is not None:
        return by_few_rows
    y = y.ravel()
    r = r.ravel()
    signed, significand, usable = _signed_excess(y, r, output_dtype)
    if usable.sum() < 256:
        return None
    # Each distinct reference value counts once: broadcast inputs repeat values, and repeated errors are not
    # independent samples.
    _, first = np.unique(r[usable], return_index=True)
    signed, significand = signed[usable][first], significand[usable][first]
    if signed.size < 256:
        return None
    return _elements_z(signed, significand)


def _elements_z(signed: np.ndarray, significand: np.ndarray) -> float:
    """The z of the mean signed excess with the elements as samples, less what a shared factor explains; 0 where
    the mean is under MIN_BIAS_ULP (the usual case: y == RNE(r) everywhere)."""
    mean = float(signed.mean())
    if abs(mean) < MIN_BIAS_ULP:
        return 0.0
    std = float(signed.std())
    z = float(mean / (std / sqrt(signed.size))) if std > 0.0 else float(np.copysign(np.inf, mean))
    beyond = _beyond_shared_factor(signed, significand)
    return z if beyond is None or abs(beyond) > abs(z) else beyond


def lean_ulp(output: np.ndarray, reference: np.ndarray, output_dtype: str) -> float | None:
    """The mean signed excess of the output over RNE(r), each element's clipped to one ulp (as a store's part
    is), in ulps (negative: toward zero); None where no element is usable or the dtype is not 16-bit. Clipping
    keeps the mean of an evaluation with a few large errors (a 16-bit backward's cancellations) about its lean."""
    if output_dtype not in ("float16", "bfloat16") or np.shape(output) != np.shape(reference):
        return None
    signed, _, usable = _signed_excess(
        np.asarray(output).astype(np.float64).ravel(),
        np.asarray(reference, dtype=np.float64).ravel(),
        output_dtype,
    )
    return float(np.clip(signed[usable], -1.0, 1.0).mean()) if usable.any() else None


def _signed_excess(
    y: np.ndarray, r: np.ndarray, output_dtype: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per element, in the shape given: the signed excess of y over RNE(r) in units of the output's spacing at
    r (toward zero is negative; 0 where unusable), r's significand in [0.5, 1), and which elements are usable
    (finite, normal and in range)."""
    info = dtypes.info(output_dtype)
    usable = np.isfinite(y) & np.isfinite(r) & (np.abs(r) >= info.min_normal) & (np.abs(r) <= info.max_finite)
    safe_r = np.where(usable, r, 1.0)
    significand, exponent = np.frexp(np.abs(safe_r))
    spacing = np.ldexp(1.0, exponent - (11 if output_dtype == "float16" else 8))
    # Against RNE(r), not r: the rounding errors of r itself are not independent when inputs are quantised and
    # rows share an offset (log-softmax, x - m - log s, gave z = 6.6 for a correct kernel).
    nearest = safe_r.astype(info.numpy).astype(np.float64)
    signed = np.where(usable, np.sign(safe_r) * (np.where(usable, y, 0.0) - nearest) / spacing, 0.0)
    return signed, significand, usable


def _shared_factor_groups(y: np.ndarray, r: np.ndarray, output_dtype: str) -> np.ndarray:
    """Where the output is, exactly, the reference times one factor per group, rounded once to the 16-bit dtype:
    y = RNE(r (1 + e)) for an e with |e| <= u common to every element of the group (a row of the last axis where
    rows hold MIN_ROW_ELEMENTS values, else the whole output). Each element allows e in an interval (r (1 + e)
    inside y's rounding interval); the group is explained where the intervals meet. PyTorch's bfloat16 mean
    embedding bag multiplies each bag's gradient by 1/size rounded to bfloat16 (+0.2% for 6 and 18 ids): every
    weight row of such a bag leans away from zero, by its bag's factor, exactly. A truncating store of 64 values
    has such an e in about 1 row of 70 and of 32 values in about 1 of 5: dropping those rows leaves the rest to
    show its lean."""
    info = dtypes.info(output_dtype)
    groups_y = (
        y.reshape(-1, y.shape[-1]) if y.ndim >= 2 and y.shape[-1] >= MIN_ROW_ELEMENTS else y.reshape(1, -1)
    )
    groups_r = r.reshape(groups_y.shape)
    usable = np.isfinite(groups_y) & np.isfinite(groups_r) & (np.abs(groups_r) >= info.min_normal)
    usable &= (np.abs(groups_r) <= info.max_finite) & (groups_y != 0)
    safe_y = np.where(usable, groups_y, 1.0).astype(info.numpy)
    below = np.nextafter(safe_y, np.asarray(-np.inf, dtype=info.numpy)).astype(np.float64)
    above = np.nextafter(safe_y, np.asarray(np.inf, dtype=info.numpy)).astype(np.float64)
    middle = safe_y.astype(np.float64)
    safe_r = np.where(usable, groups_r, 1.0)
    ends = ((middle + below) / 2.0 / safe_r - 1.0, (middle + above) / 2.0 / safe_r - 1.0)
    low = np.where(usable, np.minimum(*ends), -np.inf).max(axis=-1)
    high = np.where(usable, np.maximum(*ends), np.inf).min(axis=-1)
    u = info.unit_roundoff
    explained = (usable.sum(axis=-1) >= MIN_ROW_ELEMENTS) & (low <= high) & (low <= u) & (high >= -u)
    return np.broadcast_to(explained[:, None], groups_y.shape).reshape(y.shape)


BEYOND_ROUNDING_ULP = 1.5  # an output this far from RNE(r) was not rounded from an accurate value
BEYOND_ROUNDING_SHARE = 0.05


def _rounded_from_accurate(output: np.ndarray, reference: np.ndarray, output_dtype: str) -> bool:
    """Whether the output looks like an accurate value rounded once to the 16-bit dtype (within about an ulp of
    RNE(r) nearly everywhere), which is what the bias test is about: a store that truncates. Where more than 5%
    of the elements are further off, the output carries errors of its own (a backward computed from outputs
    saved in 16 bits, exp of a rounded log-probability), correlated through shared values, and their lean says
    nothing about the store; the error allowance judges them instead."""
    if output.shape != reference.shape:
        return False
    signed, _, usable = _signed_excess(output.astype(np.float64), reference, output_dtype)
    if not usable.any():
        return True
    return float((np.abs(signed[usable]) > BEYOND_ROUNDING_ULP).mean()) <= BEYOND_ROUNDING_SHARE


MIN_ROWS = (
    8  # rows needed to test across rows: a t statistic on 7 degrees of freedom rarely passes 6 by chance
)
MIN_ROW_ELEMENTS = 32


def _row_bias_z(output: np.ndarray, reference: np.ndarray, output_dtype: str) -> float | None:
    """The bias test with rows (the last axis) as the independent samples, where there are enough of them.

    Elements of one row are not independent: a statistic the row shares (a softmax's log-sum-exp, a norm's rstd,
    a variance's mean), rounded once, shifts every element of the row by the same relative amount, which the
    elementwise test reads as a bias (z = 20-60 on PyTorch's own 16-bit log-softmax and norm backward). Such a
    shift has a different sign from row to row; a truncating store leans toward zero in every row. So the mean
    signed excess of each row is one sample, and z is their t statistic. None where rows are too few."""
    if output.ndim < 2 or output.shape != reference.shape or output.shape[-1] < MIN_ROW_ELEMENTS:
        return None
    y = output.astype(np.float64).reshape(-1, output.shape[-1])
    r = reference.reshape(-1, reference.shape[-1])
    signed, significand, usable = _signed_excess(y, r, output_dtype)
    counts = usable.sum(axis=-1)
    full = counts >= MIN_ROW_ELEMENTS
    # Rows repeated by a broadcast input are one sample, not many.
    means = np.unique(signed[full].sum(axis=-1) / counts[full])
    if means.size < MIN_ROWS:
        return None
    mean = float(means.mean())
    if abs(mean) < MIN_BIAS_ULP:
        return 0.0
    std = float(means.std(ddof=1))
    z = float(mean / (std / sqrt(means.size))) if std > 0.0 else float(np.copysign(np.inf, mean))
    pooled = full[:, None] & usable
    beyond = _beyond_shared_factor(signed[pooled], significand[pooled])
    return z if beyond is None or abs(beyond) > abs(z) else beyond


def _few_rows_bias_z(y: np.ndarray, r: np.ndarray, output_dtype: str) -> float | None:
    """With 2 to MIN_ROWS - 1 rows of MIN_ROW_ELEMENTS values or more: each row tested on its own (its elements
    as samples, less what a factor explains), and a bias only where every row leans the same way, the weakest
    row's z the verdict. A truncating store leans toward zero in every row; a factor each row shares (torch's
    float16 std backward multiplies a row by g / (2 std) rounded to float16) leans each row its own way, which
    the elements of all rows pooled read as a bias (z = 14.6 over 7 rows leaning -0.15 to +0.48 ulp). None
    where the rows are not of that kind."""
    if y.ndim < 2 or y.shape != r.shape or y.shape[-1] < MIN_ROW_ELEMENTS:
        return None
    rows_y, rows_r = y.reshape(-1, y.shape[-1]), r.reshape(-1, r.shape[-1])
    signed, significand, usable = _signed_excess(rows_y, rows_r, output_dtype)
    counts = usable.sum(axis=-1)
    full = counts >= MIN_ROW_ELEMENTS
    if not 2 <= int(full.sum()) < MIN_ROWS:
        return None
    verdicts = [
        _elements_z(signed[row][usable[row]], significand[row][usable[row]]) for row in np.flatnonzero(full)
    ]
    if not (all(v > 0 for v in verdicts) or all(v < 0 for v in verdicts)):  # a row without a lean: 0
        return 0.0
    return min(verdicts, key=abs)


# What a shared factor (a constant such as 2/(n-1), 1/N or a scale rounded once to the 16-bit dtype, a
# statistic every element is multiplied by) can move a value by, at most, in ulps: half an ulp at the top of
# a binade. A store's lean larger than this is not explained by one.
SHARED_FACTOR_MAX_ULP = 0.25
SLOPE_Z = 3.0  # the lean grows with the significand at least this significantly: a factor's signature
SMALL_LEAN_ULP = 0.1  # a lean this small cannot be told apart by its slope; it is judged by its constant part


def _beyond_shared_factor(signed: np.ndarray, significand: np.ndarray) -> float | None:
    """The z of the part of the lean that a shared factor cannot explain, or None where a factor does not fit
    (the caller keeps the smaller of it and the lean's own z: a model fit to pooled elements must not make a
    verdict taken over rows harsher).

        Multiplying every element by a factor rounded once (1 + e, |e| <= u) moves a value with significand f in
        [0.5, 1) by e*f*2^p ulps: a lean that grows with f inside each binade. A truncating store moves every value
        the same half ulp whatever its f. So the signed excess (clipped to one ulp, as the store's part is) is fit
        as a + b*f: where it grows with f (|z_b| >= 3) or is too small to tell (under 0.1 ulp), the constant part a
        is what a store did, and its z is returned. A truncating store keeps a near -0.5 ulp and its slope near
        0, so it is still reported (PyTorch's own var backward in float16, a factor 2/(n-1) rounded to float16,
        leans -0.37 ulp on average with z = -47 and a = -0.05)."""
    if signed.size < 16:
        return None
    excess = np.clip(signed, -1.0, 1.0)
    centred = significand - significand.mean()
    spread = float((centred**2).sum())
    if spread <= 0.0:
        return None
    slope = float((centred * excess).sum() / spread)
    at_mean = float(excess.mean())
    intercept = at_mean - slope * float(significand.mean())
    residual = excess - at_mean - slope * centred
    dof = max(excess.size - 2, 1)
    variance = float((residual**2).sum()) / dof
    if variance <= 0.0:
        return None
    se_slope = sqrt(variance / spread)
    se_intercept = sqrt(variance * (1.0 / excess.size + float(significand.mean()) ** 2 / spread))
    grows = abs(slope) / se_slope >= SLOPE_Z
    if not (grows or abs(at_mean) < SMALL_LEAN_ULP) or abs(intercept) >= SHARED_FACTOR_MAX_ULP:
        return None
    return intercept / se_intercept
