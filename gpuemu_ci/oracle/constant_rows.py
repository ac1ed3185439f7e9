"""The backward of a dispersion statistic (a variance) on rows whose values are all equal (issue #32).

A correct backward of a variance computes `slope * g * (x - fl(mean))` with the mean rounded to the dtype and
accumulated over the row. On a constant row the exact gradient is 0, but `x - fl(mean)` is the mean's rounding
(PyTorch's float32 mean of 63 copies of -1.698 is one ulp off, so its gradient is 1.5e-8 where the exact one is
0). row_statistics models that rounding from the gradient's slope in `x - mean`, read off the reference's
gradient on the case's other rows; where every row is constant there is no other row, and the reference's
gradient is 0 (or its own rounding) everywhere, which shows no form at all.

So the slope is probed: the reference's float64 backward is evaluated where each constant row holds a centred
ramp `c + s d` (`d = i - (n - 1) / 2`), at two scales s and 2s. Where its gradient there is `sigma (x - mean)`
along the row (sums to 0 and is proportional to the centred values, to row_statistics' form tolerance) with the
same sigma at both scales (a gradient linear in `x - mean`: a variance), the allowance is `|sigma| * delta_mean`,
the mean's error the non-constant rows are allowed. Where sigma halves as the ramp doubles (a std: homogeneous
of degree 1 in `x - mean`), the statistic is not differentiable on the constant row, its gradient everywhere else
has one norm, and a kernel's rounded mean picks the direction: the allowance is that norm per element
(`probed_norm`). Nothing else is widened: a row that is not constant, or whose probe shows any other form, gets
nothing here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

# The reference's float64 gradients (by input name) at other values of the forward's inputs, for the case's
# upstream gradients; None where the reference cannot be evaluated there.
Probe = Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray] | None]

# The ramp's size relative to the row's value (1 for a row of zeros): small enough to stay in the row's own
# magnitude range, large enough that float64 resolves every step.
_RAMP = 2.0**-20


def constant_rows(x: np.ndarray) -> np.ndarray:
    """Per row (trailing axis of 1), whether every value of the row is the same finite value."""
    finite = np.all(np.isfinite(x), axis=-1, keepdims=True)
    return np.asarray(finite & np.all(x == x[..., :1], axis=-1, keepdims=True) & (x.shape[-1] > 1))


def probed_slope(
    probe: Probe | None, inputs: Mapping[str, np.ndarray], name: str, x: np.ndarray, tolerance: float
) -> np.ndarray | None:
    """|sigma| per row (trailing axis of 1) where the row is constant and the reference's gradient at the
    probed ramps is sigma (x - mean) with one sigma at both scales; 0 on every other row; None where no row is
    constant or the probe failed."""
    probed = _probed(probe, inputs, name, x, tolerance)
    if probed is None:
        return None
    constant, (first, _), (second, _) = probed
    same = np.abs(first - second) <= tolerance * np.maximum(np.abs(first), np.abs(second))
    return np.where(constant & same, np.abs(first), 0.0)


def probed_norm(
    probe: Probe | None, inputs: Mapping[str, np.ndarray], name: str, x: np.ndarray, tolerance: float
) -> np.ndarray | None:
    """Per row (trailing axis of 1), the norm of the reference's gradient at the probed ramps where the row is
    constant and that gradient is sigma (x - mean) with sigma halving as the ramp doubles: a statistic
    homogeneous of degree 1 in x - mean (a std), not differentiable on a constant row, whose gradient everywhere
    else has that one norm. A kernel's rounded mean picks the direction there: PyTorch's float64 std of 9 copies
    of -4094.59 is 4.5e-13 and its gradient 0.111 g in every element, a vector of that norm. 0 on every other
    row; None where no row is constant or the probe failed."""
    probed = _probed(probe, inputs, name, x, tolerance)
    if probed is None:
        return None
    constant, (first, first_norm), (second, second_norm) = probed
    halves = np.abs(first - 2.0 * second) <= tolerance * np.abs(first)
    same_norm = np.abs(first_norm - second_norm) <= tolerance * np.maximum(first_norm, second_norm)
    return np.where(constant & halves & same_norm & np.isfinite(first), first_norm, 0.0)


def _probed(
    probe: Probe | None, inputs: Mapping[str, np.ndarray], name: str, x: np.ndarray, tolerance: float
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]] | None:
    """The constant rows, and at each ramp scale (s, 2s) sigma per row (NaN where the gradient is not
    sigma (x - mean)) with the gradient's norm along the row."""
    constant = constant_rows(x)
    if probe is None or not np.any(constant):
        return None
    n = x.shape[-1]
    d = np.arange(n, dtype=np.float64) - (n - 1) / 2.0
    base = np.where(x[..., :1] != 0, np.abs(x[..., :1]), 1.0)
    found_at: list[tuple[np.ndarray, np.ndarray]] = []
    for scale in (_RAMP, 2.0 * _RAMP):
        ramp = np.where(constant, x + scale * base * d, x)
        found = probe({**inputs, name: ramp})
        grad = None if found is None else found.get(name)
        if grad is None or np.shape(grad) != x.shape:
            return None
        grad = np.asarray(grad, dtype=np.float64)
        norm = np.sqrt((np.where(np.isfinite(grad), grad, 0.0) ** 2).sum(axis=-1, keepdims=True))
        found_at.append((_linear_in_centred(grad, ramp, constant, tolerance), norm))
    return constant, found_at[0], found_at[1]


def _linear_in_centred(grad: np.ndarray, ramp: np.ndarray, rows: np.ndarray, tolerance: float) -> np.ndarray:
    """sigma per row where grad = sigma (ramp - mean) along the row (within `tolerance` of the row's largest
    |grad|), NaN where it is not."""
    centred = ramp - ramp.mean(axis=-1, keepdims=True)
    weight = (centred * centred).sum(axis=-1, keepdims=True)
    sigma = (grad * centred).sum(axis=-1, keepdims=True) / np.where(weight > 0, weight, 1.0)
    size = np.abs(grad).max(axis=-1, keepdims=True)
    residual = np.abs(grad - sigma * centred).max(axis=-1, keepdims=True)
    fits = (
        rows
        & (weight > 0)
        & np.all(np.isfinite(grad), axis=-1, keepdims=True)
        & (residual <= tolerance * size)
    )
    return np.where(fits, sigma, np.nan)
