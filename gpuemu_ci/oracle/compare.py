"""Element-wise comparison of the op's output with the fp64 reference, under an allowance.

Non-finite values must match the reference's class exactly: NaN where the reference is NaN, an infinity of the
same sign where the reference (rounded to the output dtype) overflows. An output that overflows where the exact
result lies within the allowance of the overflow threshold is accepted (both roundings are legitimate).
"""

from __future__ import annotations

from typing import SupportsFloat

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.oracle.model import Comparator, ErrorStats, Finding
from gpuemu_ci.results.model import FailureKind

# Defaults for allclose when neither the op nor [validation.tolerances] sets one (upstream's Python defaults).
DEFAULT_TOLERANCES = {
    "float64": (1e-10, 1e-9),
    "float32": (1e-5, 1e-4),
    "float16": (1e-3, 1e-2),
    "bfloat16": (1e-2, 1e-1),
}


def to_float64(array: np.ndarray) -> np.ndarray:
    """The array as float64 (exact for every float dtype the tool judges)."""
    return np.asarray(array).astype(np.float64)


def compare(
    output: np.ndarray,
    reference: np.ndarray,
    allowed: np.ndarray,
    comparator: Comparator,
    output_dtype: str,
) -> tuple[ErrorStats, list[Finding]]:
    """Judges float outputs; `allowed` is the per-element allowance (broadcastable to the reference). NaN and
    infinities are always judged against the reference ([validation] check_nan / check_inf add a rule of
    their own on top: oracle/nonfinite_rules.py)."""
    y = to_float64(output)
    r = np.asarray(reference, dtype=np.float64)
    allowed = np.broadcast_to(np.asarray(allowed, dtype=np.float64), r.shape)
    info = dtypes.info(output_dtype)
    findings: list[Finding] = []
    total = int(r.size)
    # The reference "overflows" when it rounds to infinity in the output dtype.
    threshold = info.max_finite * (1.0 + info.unit_roundoff) if info.is_float else np.inf
    if total and -threshold < r.min() and r.max() < threshold and allowed.min() > 0:
        judged = _compare_finite(y, r, allowed, comparator)
        if judged is not None:
            return judged

    y_nan, r_nan = np.isnan(y), np.isnan(r)
    r_over = ~r_nan & (np.abs(r) >= threshold)
    y_inf = np.isinf(y)
    near_threshold = ~r_nan & (np.abs(r) + allowed >= info.max_finite)
    inf_ok = y_inf & near_threshold & (np.sign(y) == np.sign(r))
    max_ok = (
        (np.abs(y) == info.max_finite)
        & r_over
        & (np.abs(r) - allowed <= threshold)
        & (np.sign(y) == np.sign(r))
    )

    bad_nan = y_nan != r_nan
    bad_inf = (y_inf & ~inf_ok) | (r_over & ~y_inf & ~max_ok & ~y_nan)
    nonfinite_bad = bad_nan | bad_inf
    if nonfinite_bad.any():
        index = _first(nonfinite_bad)
        findings.append(
            Finding(
                FailureKind.NONFINITE,
                f"{int(nonfinite_bad.sum())} of {total} elements have the wrong non-finite class; first at {index}: "
                f"got {_fmt(y[index])}, reference {_fmt(r[index])}",
            )
        )

    finite = np.isfinite(y) & np.isfinite(r) & ~r_over
    error = np.where(finite, np.abs(y - np.where(finite, r, 0.0)), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(finite, error / np.where(allowed > 0, allowed, np.inf), 0.0)
        ratio = np.where(finite & (allowed <= 0) & (error > 0), np.inf, ratio)
    exceeded_mask = ratio > 1.0
    exceeded = int(exceeded_mask.sum())
    worst = _argmax(ratio) if total else None
    stats = ErrorStats(
        comparator=comparator,
        headroom=float(ratio[worst]) if worst is not None else 0.0,
        max_abs_error=float(error.max()) if total else 0.0,
        worst_index=worst,
        exceeded=exceeded,
        total=total,
        allowed_at_worst=float(allowed[worst]) if worst is not None else None,
        ratio=np.where(nonfinite_bad, np.inf, ratio),
    )
    if exceeded:
        assert worst is not None
        findings.append(
            Finding(
                FailureKind.MISMATCH,
                f"{exceeded} of {total} elements exceed the {comparator.value} allowance; worst at {worst}: "
                f"got {_fmt(y[worst])}, reference {_fmt(r[worst])}, error {error[worst]:.3g} vs allowed "
                f"{allowed[worst]:.3g} ({ratio[worst]:.3g}x)",
            )
        )
    return stats, findings


def _compare_finite(
    y: np.ndarray, r: np.ndarray, allowed: np.ndarray, comparator: Comparator
) -> tuple[ErrorStats, list[Finding]] | None:
    """`compare` when the reference is finite and below the overflow threshold and every allowance is
    positive: then only a non-finite output needs the general path (None), and the same figures come out of
    a few passes over memory instead of a few dozen."""
    error = np.subtract(y, r)
    np.abs(error, out=error)
    max_error = float(error.max())
    if not np.isfinite(max_error):  # a NaN or an infinity in the output (or y - r overflowed)
        return None
    ratio = np.divide(error, allowed)
    worst = _argmax(ratio)
    exceeded = int(np.count_nonzero(ratio > 1.0))
    total = int(r.size)
    stats = ErrorStats(
        comparator=comparator,
        headroom=float(ratio[worst]),
        max_abs_error=max_error,
        worst_index=worst,
        exceeded=exceeded,
        total=total,
        allowed_at_worst=float(allowed[worst]),
        ratio=ratio,
    )
    findings = []
    if exceeded:
        findings.append(
            Finding(
                FailureKind.MISMATCH,
                f"{exceeded} of {total} elements exceed the {comparator.value} allowance; worst at {worst}: "
                f"got {_fmt(y[worst])}, reference {_fmt(r[worst])}, error {error[worst]:.3g} vs allowed "
                f"{allowed[worst]:.3g} ({ratio[worst]:.3g}x)",
            )
        )
    return stats, findings


def compare_exact(
    output: np.ndarray, reference: np.ndarray, output_dtype: str
) -> tuple[ErrorStats, list[Finding]]:
    """`exact` family: the output must equal the reference rounded to the output dtype (NaN equals NaN)."""
    expected = np.asarray(reference).astype(dtypes.info(output_dtype).numpy)
    y = np.asarray(output)
    if dtypes.info(output_dtype).is_float:
        ye, ee = to_float64(y), to_float64(expected)
        differ = ~((ye == ee) | (np.isnan(ye) & np.isnan(ee)))
        with np.errstate(invalid="ignore"):  # inf - inf where both are the same infinity (not a difference)
            error = np.where(differ, np.abs(np.nan_to_num(ye - ee, nan=np.inf)), 0.0)
    else:
        differ = y != expected
        error = np.abs(y.astype(np.float64) - expected.astype(np.float64))
    total = int(differ.size)
    count = int(differ.sum())
    worst = _first(differ) if count else None
    stats = ErrorStats(
        Comparator.EXACT,
        headroom=float(count > 0) if total else 0.0,
        max_abs_error=float(error.max()) if total else 0.0,
        worst_index=worst,
        exceeded=count,
        total=total,
        allowed_at_worst=0.0 if count else None,
        ratio=np.where(differ, np.inf, 0.0),  # no allowance: every difference is over it
    )
    findings = []
    if count and worst is not None:
        findings.append(
            Finding(
                FailureKind.MISMATCH,
                f"{count} of {total} elements differ from the exact result; first at {worst}: got "
                f"{_fmt(y[worst])}, expected {_fmt(expected[worst])}",
            )
        )
    return stats, findings


def allclose_allowance(reference: np.ndarray, atol: float, rtol: float) -> np.ndarray:
    """atol + rtol |r| per element: the ALLCLOSE comparator's allowance."""
    return atol + rtol * np.abs(np.asarray(reference, dtype=np.float64))


def _first(mask: np.ndarray) -> tuple[int, ...]:
    flat = int(np.flatnonzero(mask)[0])
    return tuple(int(i) for i in np.unravel_index(flat, mask.shape))


def _argmax(values: np.ndarray) -> tuple[int, ...]:
    flat = int(np.argmax(values))
    return tuple(int(i) for i in np.unravel_index(flat, values.shape))


def _fmt(value: object) -> str:
    if not isinstance(value, SupportsFloat | str):
        return repr(value)
    try:
        return f"{float(value):.9g}"
    except (TypeError, ValueError):
        return repr(value)
