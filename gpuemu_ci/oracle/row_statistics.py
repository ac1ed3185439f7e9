"""What a correct backward of a row statistic inherits from the forward it saved (issue #32).

A reduction over the last dim (a log-sum-exp, a variance, a standard deviation) has a backward that a correct
kernel computes from quantities the forward saved in the tensors' dtype, not from the exact ones the reference's
autograd differentiates through:

- a log-sum-exp's gradient is `g exp(x - y)` with y the forward's OUTPUT as stored. y errs by delta (its rounding
  to the dtype, a few units at |y| ~ 1e10 in float32), and exp turns that absolute error into a relative one:
  the gradient is `g exp(x - lse) exp(lse - y_saved)`. The allowance is that factor's distance from 1, with
  y_saved the op's own forward output (what its backward saved; the rounded exact value where the op's is not
  finite). Recognised by its form: the reference's gradient equals `g exp(x - lse)`.
- a dispersion statistic (a variance, a std: shift-invariant, so its gradient sums to 0 along the row, and
  positively homogeneous of degree 1 or 2) has a gradient linear in `x - mean`, computed with the mean rounded
  to the dtype and accumulated over the row: delta_mean = u_dtype |mean| + g(n) u_acc mean|x|, times the
  gradient's slope in the centred values (the row's sum |g_ref| over its sum |x - mean|). On offset rows
  (mean >> std) in 16 bits that is most of the gradient: torch's own `x - x.mean()` does the same.
- a statistic homogeneous of degree 1 (a std; a p-norm, whose gradient is g sign(x) (|x| / y)^(p-1)) is
  differentiated by dividing by the saved output to a power k (1; p - 1): the gradient inherits k times the
  saved output's relative error, |g_ref| |(y_ref / y_saved)^k - 1| (a float32 norm of 1024 equal values errs
  14 u in the forward, and its gradient by exactly as much).
- a cross-entropy (a reduction that picks one logit per row by a class target, issue #44) has the gradient
  `g (exp(x - lse) - onehot)`, computed from the log-sum-exp its forward saved. Its output is `lse - x_t`, so the
  saved log-sum-exp is the op's own output plus the target's logit, `y_saved + x_t`, and the gradient inherits
  `|g| exp(x - lse) |exp(lse - lse_saved) - 1|`: on a row of 65 equal logits of -4.3e9 a float32 log-sum-exp
  rounds log 65 away (its spacing there is 512), the loss comes out 0 where it is log 65, and every probability
  1 where it is 1/65. Recognised by its form, as the log-sum-exp's.

And for every gradient, `gradient_floor`: an element whose exact value is below the smallest normal number of
the precision its intermediates live in (float32 for 16-bit and float32 cases, float64 for float64) may come out
flushed to zero or computed through flushed intermediates (GPUs run float32 with -ftz; a float64 product of
subnormals loses its bits), so an absolute floor of that smallest normal is allowed (times the bound's c).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from math import sqrt

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.config.model import Family, OpSpec
from gpuemu_ci.oracle import bounds, constant_rows, intermediates

# How closely the reference's float64 gradient must follow a form for the form's model to apply: far looser
# than float64's rounding, far tighter than any other mathematics would match by chance.
FORM_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Forward:
    """The forward pass a gradient's backward computed from."""

    inputs: Mapping[str, np.ndarray]  # the case's logical inputs
    reference: tuple[np.ndarray, ...]  # the reference's forward outputs
    saved: tuple[np.ndarray, ...] | None  # the op's own forward outputs: what its backward saved
    upstream: tuple[np.ndarray | None, ...]  # the upstream gradient of each output
    kwargs: Mapping[str, object] = field(default_factory=dict)  # the case's kwargs (a norm's `eps`)
    probe: constant_rows.Probe | None = None  # the reference's gradients elsewhere (constant_rows.py)


def gradient_floor(op: OpSpec, case_dtype: str, grad_dtype: str) -> float:
    """The absolute floor of a gradient's allowance (before c): the gradient dtype's own (half its smallest
    subnormal, its smallest normal under flush-to-zero), and at least the smallest normal number of the precision
    the intermediates live in (module docstring)."""
    working = op.error_model.accumulator or ("float64" if case_dtype == "float64" else "float32")
    info = dtypes.info(working)
    return max(bounds.floor_term(op, grad_dtype), info.min_normal if info.is_float else 0.0)


@dataclass(frozen=True)
class Allowance:
    """What a saved row statistic adds to a gradient's allowance, and what it says."""

    term: np.ndarray | float  # before the bound's c
    words: str  # what it includes, for the failure message
    zero_excused: np.ndarray | None = None  # where a gradient of exactly 0 is the backward's subgradient


NONE = Allowance(0.0, "")


def saved_statistics(
    op: OpSpec,
    case_dtype: str,
    forward: Forward | None,
    name: str,
    r: np.ndarray,
    grad_dtype: str,
    correlated: bool = False,
) -> Allowance:
    """The rounding of what the forward saved, as the gradient of `name` inherits it (module docstring); NONE
    where the op is no row statistic or its gradient has neither form."""
    row = _row(op, forward, name, r)
    if row is None:
        return NONE
    x, y, g, saved = row
    with np.errstate(all="ignore"):
        if _is_log_sum_exp(x, g, r):
            return _saved_output(x, saved, r, grad_dtype)
        picked = _class_targets(op, forward, x)
        if picked is not None and _is_cross_entropy(x, g, r, *picked):
            kept, onehot = picked
            logit = (x * onehot).sum(axis=-1, keepdims=True)
            lse_saved = None if saved is None else np.where(kept, saved + logit, np.nan)
            m, s = _log_sum_exp(x)
            scale = np.abs(g) * np.exp((x - m) - s) * kept
            return _saved_output(x, lse_saved, scale, grad_dtype, CROSS_ENTROPY_WORDS)
        degree = _euler_degree(x, y, g, r)
        found = NONE
        sixteen = intermediates.rounds_in_case_dtype(op, case_dtype)
        if degree is not None and _is_shift_invariant(x, y, r):
            found = _rounded_mean(op, case_dtype, x, g, r, correlated)
            if sixteen:  # the factor a 16-bit backward multiplies x - mean by: 2 g / (n - c), g / ((n - c) y)
                found = _with_small_factor(
                    found, _slope(x, r), r, case_dtype, "the gradient's slope in x - mean"
                )
            power = 1.0 if degree == 1.0 else 0.0  # a std's (x - mean) / y; a variance's divides by nothing
        else:
            power = _norm_power(x, y, g, r) if degree == 1.0 else 0.0
        if power:
            divided = _divided_by_saved(y, saved, r, power, grad_dtype)
            if sixteen:
                factor = np.abs(g) / np.abs(y) ** power
                divided = _with_small_factor(divided, factor, r, case_dtype, f"g / y^{power:.3g}")
            found = Allowance(found.term + divided.term, found.words + divided.words, divided.zero_excused)
        constant = _constant_rows(op, case_dtype, forward, name, x, r, correlated)
        if constant is not None:
            found = Allowance(
                np.maximum(found.term, constant.term), found.words + constant.words, found.zero_excused
            )
    return found


def dispersion_in_dtype(
    op: OpSpec, case_dtype: str, forward: Forward | None, name: str, r: np.ndarray
) -> np.ndarray | None:
    """A variance's or a std's gradient as autograd's formula evaluates it in the case's dtype, each product
    rounded: `(2 / (n - c)) g (x - mean)` for a variance and, for a std, g first divided by twice the saved
    output; the mean and x - mean rounded too. PyTorch's CPU bfloat16 std backward is this, bit for bit: with
    n - c = 1022 the factor 2/1022 lies 0.2% above 2^-9, and times a bfloat16 value it rounds back to 2^-9 times
    that value in every row, so the whole gradient leans toward zero (-0.28 ulp, z = -6.7 over 64 rows). For the
    bias test (oracle/gradients.py), not the allowance; None where the gradient has no dispersion form."""
    row = _row(op, forward, name, r)
    if row is None or dtypes.info(case_dtype).bits > 32:
        return None
    x, y, g, saved = row
    cast = dtypes.info(case_dtype).numpy

    def rounded(a: np.ndarray) -> np.ndarray:
        return np.asarray(a).astype(cast).astype(np.float64)

    with np.errstate(all="ignore"):
        degree = _euler_degree(x, y, g, r)
        if degree is None or not _is_shift_invariant(x, y, r):
            return None
        mean = x.mean(axis=-1, keepdims=True)
        variance = y if degree == 2.0 else y * y
        divisor = ((x - mean) ** 2).sum(axis=-1, keepdims=True) / variance  # n - correction
        divisor = np.where(
            np.abs(divisor - np.round(divisor)) <= 1e-6 * np.abs(divisor), np.round(divisor), divisor
        )
        upstream = rounded(g)
        if degree == 1.0:
            output = saved if saved is not None else rounded(y)
            upstream = rounded(upstream / rounded(2.0 * output))
        gradient = rounded(2.0 / divisor * upstream) * rounded(x - rounded(mean))
    return np.where(np.isfinite(gradient), gradient, np.nan)


def _constant_rows(
    op: OpSpec,
    case_dtype: str,
    forward: Forward | None,
    name: str,
    x: np.ndarray,
    r: np.ndarray,
    correlated: bool,
) -> Allowance | None:
    """A variance's gradient on rows of equal values: the probed slope in x - mean times the mean's error
    (oracle/constant_rows.py); None where no row is constant or the probe shows no such slope."""
    if forward is None:
        return None
    slope = constant_rows.probed_slope(forward.probe, forward.inputs, name, x, FORM_TOLERANCE)
    if slope is None or not np.any(slope > 0):
        norm = constant_rows.probed_norm(forward.probe, forward.inputs, name, x, FORM_TOLERANCE)
        if norm is None or not np.any(norm > 0):
            return None
        words = (
            "; on rows of equal values, where the statistic is not differentiable, any gradient of the norm its "
            "gradient has elsewhere (probed by the reference's backward on a ramp added to the row)"
        )
        return Allowance(np.broadcast_to(norm, r.shape), words)
    term = np.broadcast_to(slope * _mean_error(op, case_dtype, x, correlated), r.shape)
    words = (
        "; on rows of equal values (exact gradient 0) it includes the mean the backward centres x with, rounded "
        "to the dtype and accumulated (the slope in x - mean, probed by the reference's backward on a ramp "
        "added to the row, × the mean's error)"
    )
    return Allowance(term, words)


def _mean_error(op: OpSpec, case_dtype: str, x: np.ndarray, correlated: bool) -> np.ndarray:
    """u |mean| + g(n) u_acc mean|x|: the error of a mean rounded to the case's dtype and accumulated over the
    row (a trailing axis of 1)."""
    n = x.shape[-1]
    u_case = dtypes.info(case_dtype).unit_roundoff
    u_acc = bounds.accumulator_roundoff(op, case_dtype)
    g_n = float(n) if correlated else sqrt(n)
    return np.asarray(
        u_case * np.abs(x.mean(axis=-1, keepdims=True)) + g_n * u_acc * np.abs(x).mean(axis=-1, keepdims=True)
    )


def _row(
    op: OpSpec, forward: Forward | None, name: str, r: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None] | None:
    """(x, y_ref, upstream, y_saved) with a trailing axis of 1 on the row's values, for a reduction whose first
    output is one value per row of the input `name`; None otherwise."""
    if op.error_model.family is not Family.REDUCTION or forward is None or not forward.reference:
        return None
    if name not in forward.inputs or not forward.upstream or forward.upstream[0] is None:
        return None
    x = np.asarray(forward.inputs[name]).astype(np.float64)
    if x.ndim < 1 or x.shape != r.shape or x.shape[-1] < 1:
        return None
    rows = x.shape[:-1]
    y = np.asarray(forward.reference[0], dtype=np.float64)
    g = np.asarray(forward.upstream[0]).astype(np.float64)
    if y.size != int(np.prod(rows)) or g.shape != y.shape:
        return None
    saved = None
    if forward.saved and np.shape(forward.saved[0]) == y.shape:
        saved = np.asarray(forward.saved[0]).astype(np.float64).reshape(*rows, 1)
    return x, y.reshape(*rows, 1), g.reshape(*rows, 1), saved


def _log_sum_exp(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(m, s) with the row's exact log-sum-exp m + s, kept apart: m + s rounded to float64 loses s at huge m
    (m = 1e77 with three equal maxima: the reference's own output is m, its gradient one third)."""
    finite = np.where(np.isfinite(x), x, -np.inf)
    m = finite.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    return m, np.log(np.exp(finite - m).sum(axis=-1, keepdims=True))


def _is_log_sum_exp(x: np.ndarray, g: np.ndarray, r: np.ndarray) -> bool:
    """The reference's gradient is g exp(x - lse) wherever it is finite."""
    m, s = _log_sum_exp(x)
    predicted = g * np.exp((x - m) - s)
    usable = np.isfinite(predicted) & np.isfinite(r)
    if not np.any(usable & (predicted != 0)):
        return False
    tiny = dtypes.info("float64").min_normal
    return bool(np.all(np.abs(r - predicted)[usable] <= (FORM_TOLERANCE * np.abs(predicted) + tiny)[usable]))


LOG_SUM_EXP_WORDS = (
    "; it includes the rounding of the saved log-sum-exp output the backward computes exp(x - y) from "
    "(|g_ref| × |exp(lse - y_saved) - 1|, |lse - y_saved| up to {largest:.3g}, y_saved the op's own forward output)"
)
CROSS_ENTROPY_WORDS = (
    "; it includes the rounding of the log-sum-exp a cross-entropy's backward computes exp(x - lse) from "
    "(|g| exp(x - lse) × |exp(lse - lse_saved) - 1|, |lse - lse_saved| up to {largest:.3g}, lse_saved the op's own "
    "forward output plus the target's logit)"
)


def _saved_output(
    x: np.ndarray,
    saved: np.ndarray | None,
    scale: np.ndarray,
    grad_dtype: str,
    words: str = LOG_SUM_EXP_WORDS,
) -> Allowance:
    """scale |exp(lse - lse_saved) - 1| (scale: |g_ref| for a log-sum-exp, |g| exp(x - lse) for a
    cross-entropy), and the gradient's rounding at the value that moved; the rounded exact log-sum-exp where
    nothing finite was saved."""
    m, s = _log_sum_exp(x)
    rounded = (m + s).astype(dtypes.info(grad_dtype).numpy).astype(np.float64)
    if saved is None:
        saved = rounded
    saved = np.where(np.isfinite(saved), saved, rounded)
    moved = np.where(np.isfinite(saved), (m - saved) + s, 0.0)  # m - saved is exact where they are close
    magnitude = np.abs(np.where(np.isfinite(scale), scale, 0.0))
    u_g = dtypes.info(grad_dtype).unit_roundoff
    term = magnitude * np.abs(np.expm1(moved)) + u_g * magnitude * np.exp(moved)
    largest = float(np.max(np.abs(moved), initial=0.0))
    return Allowance(term, words.format(largest=largest))


def _class_targets(
    op: OpSpec, forward: Forward | None, x: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """(kept rows, one-hot of each row's target) for a reduction that picks one logit per row by a class
    target (intermediates.class_target); None otherwise."""
    spec = intermediates.class_target(op)
    if spec is None or forward is None or spec.name not in forward.inputs:
        return None
    target = np.asarray(forward.inputs[spec.name])
    if target.shape != x.shape[:-1] or target.dtype.kind not in "iu":
        return None
    target = target.astype(np.int64)
    kept = target != spec.ignore_value if spec.ignore_value is not None else np.ones(target.shape, bool)
    inside = kept & (target >= 0) & (target < x.shape[-1])
    if not np.array_equal(inside, kept):
        return None
    onehot = np.zeros(x.shape)
    np.put_along_axis(onehot, np.where(kept, target, 0)[..., None], 1.0, axis=-1)
    return kept[..., None], onehot * kept[..., None]


def _is_cross_entropy(
    x: np.ndarray, g: np.ndarray, r: np.ndarray, kept: np.ndarray, onehot: np.ndarray
) -> bool:
    """The reference's gradient is g (exp(x - lse) - onehot) on kept rows, 0 on ignored ones."""
    m, s = _log_sum_exp(x)
    predicted = np.where(kept, g * (np.exp((x - m) - s) - onehot), 0.0)
    usable = np.isfinite(predicted) & np.isfinite(r)
    if not np.any(usable & (predicted != 0)):
        return False
    tiny = dtypes.info("float64").min_normal
    size = np.abs(g) * (np.exp((x - m) - s) + onehot)
    return bool(np.all(np.abs(r - predicted)[usable] <= (FORM_TOLERANCE * size + tiny)[usable]))


def _is_shift_invariant(x: np.ndarray, y: np.ndarray, r: np.ndarray) -> bool:
    """The reference's gradient sums to 0 along every row: the statistic ignores a shift of the row."""
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(r)) and np.all(np.isfinite(y))):
        return False
    size = np.abs(r).sum(axis=-1, keepdims=True)
    return bool(np.any(size > 0)) and not np.any(
        np.abs(r.sum(axis=-1, keepdims=True)) > FORM_TOLERANCE * size
    )


def _euler_degree(x: np.ndarray, y: np.ndarray, g: np.ndarray, r: np.ndarray) -> float | None:
    """k where sum x g_ref = k g y in every row (Euler's theorem for a statistic positively homogeneous of degree
    k: a norm or a std 1, a variance 2), for k 1 or 2; None otherwise."""
    finite = np.isfinite(x) & np.isfinite(r)
    euler = np.where(finite, x * r, 0.0).sum(axis=-1, keepdims=True)
    gy = g * y
    # Rows whose products lie below float64's normal range have lost the digits the form is checked to: g y, and
    # the gradient itself (g times |x| / y, about g: an upstream of 1e-323 leaves a gradient of 0 however large y).
    floor = dtypes.info("float64").min_normal / FORM_TOLERANCE
    resolved = (np.abs(gy) > floor) & (np.abs(g) > floor)
    live = np.isfinite(gy) & resolved & np.all(finite, axis=-1, keepdims=True)
    if not np.any(live):
        return None
    degree = euler[live] / gy[live]
    for k in (1.0, 2.0):
        if np.all(np.abs(degree - k) <= FORM_TOLERANCE * k):
            return k
    return None


def _norm_power(x: np.ndarray, y: np.ndarray, g: np.ndarray, r: np.ndarray) -> float:
    """k where the gradient is g sign(x) (|x| / y)^k (a p-norm's, k = p - 1: the backward divides by the saved
    norm to that power); 0 where it is not of that form."""
    ratio = np.abs(x) / y
    resolved = dtypes.info("float64").min_normal / FORM_TOLERANCE  # as in _euler_degree
    live = np.isfinite(ratio) & (ratio > 0) & (ratio < 0.999) & np.isfinite(r)
    live &= (np.abs(r) > resolved) & (np.abs(g) > resolved)
    # A float64 norm below float64's normal range is rounded to a multiple of its smallest subnormal (sqrt(15)
    # times 2e-323 comes out 15 of them, not 15.49): its rows say nothing about the form.
    live &= np.broadcast_to(np.abs(y), ratio.shape) >= dtypes.info("float64").min_normal
    if not np.any(live):
        return 0.0
    live_g = np.broadcast_to(g, r.shape)[live]
    powers = np.log(np.abs(r[live] / live_g)) / np.log(ratio[live])
    k = float(np.median(powers))
    if k < 0.5 or np.any(np.abs(powers - k) > FORM_TOLERANCE * max(k, 1.0) * 100):
        return 0.0
    if np.any(np.sign(r[live]) != np.sign(live_g * x[live])):
        return 0.0
    return k


def _divided_by_saved(
    y: np.ndarray, saved: np.ndarray | None, r: np.ndarray, power: float, grad_dtype: str
) -> Allowance:
    """|g_ref| |(y / y_saved)^k - 1|: the backward divides by the saved output (a norm, a std) to the power k, and
    inherits its relative error k times."""
    rounded = y.astype(dtypes.info(grad_dtype).numpy).astype(np.float64)
    if saved is None:
        saved = rounded
    # A saved output of 0 where the exact one is not: it underflowed (a norm of tiny values, oracle/power_sums.py),
    # and the backward returns its subgradient 0 there (PyTorch's does): exactly 0 is excused there (gradients.py).
    underflowed = (saved == 0) & (y != 0) & np.isfinite(y)
    saved = np.where(np.isfinite(saved) & (saved != 0), saved, rounded)
    ratio = np.where((saved != 0) & np.isfinite(saved), y / np.where(saved != 0, saved, 1.0), 1.0)
    magnitude = np.abs(np.where(np.isfinite(r), r, 0.0))
    term = magnitude * np.abs(np.expm1(power * np.log(np.where(ratio > 0, ratio, 1.0))))
    words = (
        f"; it includes the relative error of the saved output the backward divides by (to the power {power:.3g}: "
        "|g_ref| × |(y_ref / y_saved)^k - 1|, y_saved the op's own forward output"
        + (
            "; on rows whose saved output underflowed to 0, a gradient of exactly 0"
            if np.any(underflowed)
            else ""
        )
        + ")"
    )
    return Allowance(term, words, np.broadcast_to(underflowed, r.shape) if np.any(underflowed) else None)


def _with_small_factor(
    found: Allowance, factor: np.ndarray, r: np.ndarray, case_dtype: str, what: str
) -> Allowance:
    """A 16-bit backward (no accumulator declared) forms the upstream gradient times a row's factor in the case's
    dtype first (PyTorch's float16 p-norm backward `g / ||x||^2` for p = 3; its std backward `g / (2 std)` times
    `2 / (n - 1)`): below the dtype's normal range that factor keeps only a subnormal's bits, a relative error of
    the smallest subnormal over it (up to 1: the whole gradient where it rounds to 0), which every element of the
    row inherits. Rows of |x| = 20 in float16 (||x||_3 = 210, g / ||x||^2 = 1e-6) came out 2.5% high, a std's
    gradient with g = 6.1e-5 (g / (2 std) / 127 = 2e-8) 0 throughout; torch's float32 backward of the same inputs
    is exact."""
    info = dtypes.info(case_dtype)
    small = np.isfinite(factor) & (factor > 0) & (factor < info.min_normal)
    if not np.any(small):
        return found
    relative = np.where(small, np.minimum(1.0, info.min_subnormal / np.where(small, factor, 1.0)), 0.0)
    term = np.abs(np.where(np.isfinite(r), r, 0.0)) * relative
    words = f"; it includes {what} kept in {case_dtype} below its normal range"
    return Allowance(found.term + term, found.words + words, found.zero_excused)


def _slope(x: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Per row, the gradient's slope in the centred values: sum |g_ref| over sum |x - mean| (0 on constant
    rows)."""
    spread = np.abs(x - x.mean(axis=-1, keepdims=True)).sum(axis=-1, keepdims=True)
    size = np.abs(r).sum(axis=-1, keepdims=True)
    live = (spread > 0) & (size > 0)
    return np.where(live, size / np.where(live, spread, 1.0), 0.0)


def _rounded_mean(
    op: OpSpec, case_dtype: str, x: np.ndarray, g: np.ndarray, r: np.ndarray, correlated: bool
) -> Allowance:
    """slope x delta_mean per row (module docstring)."""
    slope = _slope(x, r)
    live = slope > 0
    # A constant row's exact gradient is 0, but x - mean with the mean rounded is not: its slope per unit of
    # upstream gradient is taken from the other rows (2/(n - c) in every row of a variance), the largest.
    per_unit = slope / np.where(g != 0, np.abs(g), np.inf)
    widest = float(np.max(per_unit[live & (g != 0)], initial=0.0))
    slope = np.where(live, slope, widest * np.abs(g))
    term = np.broadcast_to(slope * _mean_error(op, case_dtype, x, correlated), r.shape)
    words = (
        "; it includes the mean the backward centres x with, rounded to "
        f"{case_dtype} and accumulated over the row (the gradient's slope in x - mean × (u |mean| + "
        f"{'n' if correlated else 'sqrt(n)'} u_acc mean|x|))"
    )
    return Allowance(term, words)


@dataclass(frozen=True)
class SoftmaxForm:
    """Which form autograd's softmax-family gradient has (from the saved output y and the upstream g), with the
    magnitude of the terms it cancels."""

    log: bool  # log-softmax, `g - exp(y) sum g`; else softmax, `y (g - sum g y)`
    y: np.ndarray
    g: np.ndarray
    scale: np.ndarray


def softmax_form(op: OpSpec, forward: Forward | None, name: str, r: np.ndarray) -> SoftmaxForm | None:
    """The form the reference's gradient `r` of `name` has, of the two autograd computes from the saved output:

    - softmax, `y (g - sum g y)`, its terms at y (|g| + sum |g| y). Next to a dominant element (y = 1, a value at
      87 among small ones) its gradient is the tiny sum of the others' g y while g and sum g y are O(1): a
      correct kernel returns 0 there, the rounding of sum g y, far above the row's largest |g_ref| (the scale
      otherwise);
    - log-softmax, `g - exp(y) sum g`, its terms at |g| + exp(y) sum |g|.

    None for other ops and shapes, and where `r` has neither form."""
    if op.error_model.family is not Family.SOFTMAX or forward is None or not forward.reference:
        return None
    if name not in forward.inputs or not forward.upstream or forward.upstream[0] is None:
        return None
    y = np.asarray(forward.reference[0], dtype=np.float64)
    g = np.asarray(forward.upstream[0]).astype(np.float64)
    if y.shape != r.shape or g.shape != r.shape or not r.ndim:
        return None
    with np.errstate(all="ignore"):
        tiny = dtypes.info("float64").min_normal
        softmax_scale = np.abs(y) * (np.abs(g) + (np.abs(g) * np.abs(y)).sum(axis=-1, keepdims=True))
        softmax = y * (g - (g * y).sum(axis=-1, keepdims=True))
        if _matches(r, softmax, softmax_scale + tiny):
            return SoftmaxForm(False, y, g, np.asarray(softmax_scale))
        p = np.exp(y)
        log_scale = np.abs(g) + p * np.abs(g).sum(axis=-1, keepdims=True)
        log_softmax = g - p * g.sum(axis=-1, keepdims=True)
        if _matches(r, log_softmax, log_scale + tiny):
            return SoftmaxForm(True, y, g, np.asarray(log_scale))
    return None


def softmax_terms(op: OpSpec, forward: Forward | None, name: str, r: np.ndarray) -> np.ndarray | None:
    """The magnitude of the terms a softmax-family gradient cancels (softmax_form), None where it has neither
    form."""
    form = softmax_form(op, forward, name, r)
    return None if form is None else form.scale


def _matches(r: np.ndarray, predicted: np.ndarray, scale: np.ndarray) -> bool:
    usable = np.isfinite(r) & np.isfinite(predicted) & np.isfinite(scale)
    return bool(np.any(usable)) and bool(
        np.all(np.abs(r - predicted)[usable] <= FORM_TOLERANCE * scale[usable])
    )


SHIFT_NAMES = ("bias", "beta", "shift", "b")  # a norm's per-column shift, never its weight


@dataclass(frozen=True)
class NormTerms:
    """A layer norm's gradient terms: the scale of what it cancels, and a rounded mean's effect."""

    scale: np.ndarray  # the terms the gradient cancels (zeros where they are the gradient's own scale)
    saved_mean: np.ndarray  # what x_hat computed from a rounded mean moves the gradient by


@dataclass(frozen=True)
class NormRows:
    """A norm's case with each statistic's elements on one row (a trailing axis)."""

    x: np.ndarray  # rows
    g: np.ndarray  # the upstream gradient, rows
    w: np.ndarray  # the weight broadcast to x, rows (ones without a weight)
    eps: float
    shape: tuple[int, ...]  # the input's own shape
    param_axis: int  # the input's axis the weight runs along
    weight: str | None  # the weight's input name


def norm_rows(op: OpSpec, forward: Forward | None, name: str, r: np.ndarray) -> NormRows | None:
    """The case as rows, for the norm family's first input (x) or its weight: a group norm's statistics run over
    each group of channels (axis 1) and everything after it, a layer norm's over the last axis, and each
    statistic's elements go on one row. None for other ops, inputs and shapes, and where x or g is not finite."""
    if op.error_model.family is not Family.NORM or forward is None or not forward.upstream:
        return None
    first = next(iter(forward.inputs), None)
    upstream = forward.upstream[0]
    if first is None or upstream is None:
        return None
    x = np.asarray(forward.inputs[first]).astype(np.float64)
    g = np.asarray(upstream).astype(np.float64)
    if x.ndim < 1 or g.shape != x.shape or not x.size:
        return None
    rows = bounds.group_rows(x, forward.kwargs)  # group_norm's groups of channels, else None
    grouped = rows is not None
    param_axis = 1 if grouped else x.ndim - 1
    channels = x.shape[param_axis]
    weight, w = None, np.ones(channels)
    for other, value in forward.inputs.items():
        if other != first and other.lower() not in SHIFT_NAMES and np.shape(value) == (channels,):
            weight, w = other, np.asarray(value).astype(np.float64)
            break
    if not (name == first and r.shape == x.shape) and not (name == weight and r.shape == (channels,)):
        return None
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(g))):
        return None
    shape = [1] * x.ndim
    shape[param_axis] = channels
    w_full = np.broadcast_to(w.reshape(shape), x.shape)
    eps = forward.kwargs.get("eps", 0.0)
    eps = float(eps) if isinstance(eps, int | float) else 0.0

    def as_rows(a: np.ndarray) -> np.ndarray:
        return a.reshape(rows.shape) if rows is not None else a

    return NormRows(as_rows(x), as_rows(g), as_rows(w_full), eps, x.shape, param_axis, weight)


def layer_norm_terms(
    op: OpSpec, case_dtype: str, forward: Forward | None, name: str, r: np.ndarray
) -> NormTerms | None:
    """For a norm over the last axis (or, with a `num_groups` kwarg, over groups of channels, axis 1) whose
    reference gradients have layer norm's form (x's
    `rstd (g w - mean(g w) - x_hat mean(g w x_hat))`, the weight's `sum g x_hat` over the rows; w the per-column
    weight, 1 without one; eps from the kwargs):

    - the scale of the terms x's gradient cancels, rstd (|g w| + mean|g w| + |x_hat| mean|g w x_hat|): where the
      row is constant (one column, a broadcast row) the exact gradient is 0 while the terms are rstd =
      1/sqrt(eps) times |g w|, and a correct float32 kernel returns their rounding;
    - x_hat computed from a mean that errs: rounded to the case's dtype where the backward saved it there
      (PyTorch's 16-bit layer norm does), accumulated over the row, and subtracted from x (or its product with
      rstd from x rstd) in the working precision, delta = |mean - fl(mean)| + sqrt(n) u_acc mean|x| +
      u_acc (|x| + |mean|), as the forward's norm bound allows for. x_hat moves by delta rstd: x's gradient by
      delta rstd^2 (|mean(g w x_hat)| + |x_hat| |mean(g w)|), the weight's by sum |g| delta rstd. On ascending
      16-bit rows (|mean| / sigma = 110) that is an error of 10 on a gradient of 0.08;
    - an uncentred backward (PyTorch's CPU kernel: dx = rstd g w + b x + c, b = (mean sum(g w) - sum(g w x))
      rstd^3 / n), whose two sums cancel where |mean| >> std: their rounding sqrt(n) u_acc mean(|g w|
      max(|x|, |mean|)) moves x's gradient by rstd^2 times it times (|x_hat| + rstd u_acc |x|). PyTorch's float32
      one-column rows (rstd = 316) err up to 0.014 |g w| at |x| = 300 and 0.1 |g w| at 1024 (20,000 rows each).

    None for other ops, inputs and shapes."""
    found = norm_rows(op, forward, name, r)
    if found is None or not np.all(np.isfinite(r)):
        return None
    xr, shape, eps = found.x, found.shape, found.eps
    g = found.g.reshape(shape)
    tiny = dtypes.info("float64").min_normal
    with np.errstate(all="ignore"):
        n = xr.shape[-1]
        mean = xr.mean(axis=-1, keepdims=True)
        centred = xr - mean
        rstd = 1.0 / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + eps)
        if not np.all(np.isfinite(rstd)):
            return None
        x_hat = centred * rstd
        rounded = mean.astype(dtypes.info(case_dtype).numpy).astype(np.float64)
        u_acc = bounds.accumulator_roundoff(op, case_dtype)
        delta = (
            np.abs(rounded - mean)
            + sqrt(n) * u_acc * np.abs(xr).mean(axis=-1, keepdims=True)
            + u_acc * (np.abs(xr) + np.abs(mean))
        )
        if name == found.weight:
            others = tuple(i for i in range(len(shape)) if i != found.param_axis)
            x_hat_full = x_hat.reshape(shape)
            moved = (delta * rstd).reshape(shape)
            noise = (np.abs(g) * centring_noise(xr, mean, rstd).reshape(shape)).sum(axis=others)
            if not _matches(
                r,
                (g * x_hat_full).sum(axis=others),
                np.abs(g * x_hat_full).sum(axis=others) + tiny + noise / FORM_TOLERANCE,
            ):
                return None
            return NormTerms(np.zeros_like(r), np.asarray((np.abs(g) * moved).sum(axis=others)))
        gw = found.g * found.w
        mean_gw = gw.mean(axis=-1, keepdims=True)
        mean_gwx = (gw * x_hat).mean(axis=-1, keepdims=True)
        scale = rstd * (
            np.abs(gw)
            + np.abs(gw).mean(axis=-1, keepdims=True)
            + np.abs(x_hat) * np.abs(gw * x_hat).mean(axis=-1, keepdims=True)
        )
        # The reference's own x_hat is as uncertain as two float64 evaluations of it may differ (centring_noise):
        # on a constant row of 2.1e12 its mean's rounding alone leaves x_hat = -0.295 where it is 0.
        blur = x_gradient_blur(rstd, x_hat, gw, mean_gwx, centring_noise(xr, mean, rstd))
        predicted = rstd * (gw - mean_gw - x_hat * mean_gwx)
        if not _matches(r.reshape(xr.shape), predicted, scale + tiny + blur / FORM_TOLERANCE):
            return None
        saved_mean = delta * rstd * rstd * (np.abs(mean_gwx) + np.abs(x_hat) * np.abs(mean_gw))
        # An uncentred backward (PyTorch's CPU kernel): dx = rstd g w + b x + c, b = (mean sum(g w) - sum(g w x))
        # rstd^3 / n. Its two sums cancel where |mean| >> std; their rounding, carried by b, comes back times
        # (x - mean), and b x and c are rounded apart (one-column rows at rstd = 316: 0.06 where dx is 0).
        larger = np.maximum(np.abs(xr), np.abs(mean))
        sums = sqrt(n) * u_acc * (np.abs(gw) * larger).mean(axis=-1, keepdims=True)
        saved_mean = saved_mean + rstd * rstd * sums * (np.abs(x_hat) + rstd * u_acc * np.abs(xr))
        scale, saved_mean = scale.reshape(shape), saved_mean.reshape(shape)
    return NormTerms(np.asarray(scale), np.asarray(saved_mean))


def x_gradient_blur(
    rstd: np.ndarray, x_hat: np.ndarray, gw: np.ndarray, mean_gwx: np.ndarray, noise: np.ndarray
) -> np.ndarray:
    """How far x's gradient `rstd (g w - mean(g w) - x_hat mean(g w x_hat))` moves when x_hat moves by `noise`
    (to first order): the form checks of layer and RMS norms accept the reference's gradient within it."""
    return np.asarray(
        rstd * (noise * np.abs(mean_gwx) + np.abs(x_hat) * (np.abs(gw) * noise).mean(axis=-1, keepdims=True))
    )


def centring_noise(x: np.ndarray, mean: np.ndarray, rstd: np.ndarray) -> np.ndarray:
    """How far two float64 evaluations of x_hat = (x - mean) rstd over rows (a trailing axis) may lie apart: each
    rounds the mean (n u mean|x|, summed in any order), x - mean and rstd. On a row of equal float64 values x_hat
    is 0 exactly, and the reference's own x_hat is that rounding alone (1e-13 at |x| = 700, rstd = 316), so a form
    checked on such rows is checked to within it."""
    u = dtypes.info("float64").unit_roundoff
    n = x.shape[-1]
    x_hat = np.abs(x - mean) * rstd
    spread = rstd * u * (n * np.abs(x).mean(axis=-1, keepdims=True) + np.abs(x) + np.abs(mean))
    return np.asarray(2.0 * (spread + (n + 3) * u * x_hat))
