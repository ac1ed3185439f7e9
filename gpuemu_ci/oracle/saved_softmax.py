"""A softmax-family backward computed from the forward's output as stored, in the output's dtype (issue #32).

Autograd saves softmax's output y, rounded to its dtype, and computes the gradient from it:

- softmax, `y (g - sum_j g_j y_j)`: each saved y_i errs by u_y y_i (u_y the output dtype's unit roundoff). The
  factor y_i moves the gradient by u_y |y_i (g_i - s)| = u_y |g_ref_i|, and the sum s by u_y sum_j |g_j| y_j,
  which y_i multiplies: u_y (|g_ref| + y sum_j |g_j| y_j) in all. On a row of two values where g_1 and s
  nearly cancel (bfloat16, g = (-1.03, -1.38), y = (0.019, 0.981)) that is 50 times the gradient's own rounding,
  and PyTorch's CPU backward makes exactly it (its result equals y_saved (g - sum g y_saved) evaluated exactly,
  to 1e-6).
- log-softmax, `g - exp(y) sum_j g_j`: y errs by u_y |y|, exp(y) relatively as much: u_y |y| exp(y) |sum g|.

oracle/row_statistics.softmax_terms gives the scale of the terms a float32 backward rounds; this is the rounding
of the saved output itself, which is the output dtype's, not the accumulator's (2^-8 for bfloat16, not 2^-24).
"""

from __future__ import annotations

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.config.model import Family, OpSpec
from gpuemu_ci.oracle.row_statistics import FORM_TOLERANCE, Forward


def _matches(r: np.ndarray, predicted: np.ndarray, scale: np.ndarray) -> bool:
    usable = np.isfinite(r) & np.isfinite(predicted) & np.isfinite(scale)
    return bool(np.any(usable)) and bool(
        np.all(np.abs(r - predicted)[usable] <= FORM_TOLERANCE * scale[usable])
    )


def term(
    op: OpSpec, output_dtype: str, forward: Forward | None, name: str, r: np.ndarray
) -> np.ndarray | None:
    """The saved output's rounding as the gradient of `name` inherits it (module docstring), before the bound's c;
    None for other ops, inputs and shapes, and where the reference's gradient has neither form."""
    if op.error_model.family is not Family.SOFTMAX or forward is None or not forward.reference:
        return None
    if name not in forward.inputs or not forward.upstream or forward.upstream[0] is None:
        return None
    y = np.asarray(forward.reference[0], dtype=np.float64)
    g = np.asarray(forward.upstream[0]).astype(np.float64)
    if y.shape != r.shape or g.shape != r.shape or not r.ndim or not dtypes.info(output_dtype).is_float:
        return None
    u_y = dtypes.info(output_dtype).unit_roundoff
    tiny = dtypes.info("float64").min_normal
    with np.errstate(all="ignore"):
        magnitude = np.abs(np.where(np.isfinite(r), r, 0.0))
        weighted = (np.abs(g) * np.abs(y)).sum(axis=-1, keepdims=True)
        scale = np.abs(y) * (np.abs(g) + weighted)
        if _matches(r, y * (g - (g * y).sum(axis=-1, keepdims=True)), scale + tiny):
            return np.asarray(u_y * (magnitude + np.abs(y) * weighted))
        p = np.exp(y)
        total = g.sum(axis=-1, keepdims=True)
        scale = np.abs(g) + p * np.abs(g).sum(axis=-1, keepdims=True)
        if _matches(r, g - p * total, scale + tiny):
            found = u_y * np.abs(y) * p * np.abs(total)
            return np.asarray(np.where(np.isfinite(found), found, 0.0))
    return None


def words(
    op: OpSpec, output_dtype: str, forward: Forward | None, name: str, r: np.ndarray, mismatched: bool
) -> str:
    """What the allowance includes, for a mismatch's message; empty where `term` does not apply."""
    if not mismatched or term(op, output_dtype, forward, name, r) is None:
        return ""
    return (
        f"; it includes the rounding of the saved softmax output to {output_dtype}, which the backward computes "
        "from (u_y (|g_ref| + y sum |g| y) for softmax, u_y |y| exp(y) |sum g| for log-softmax)"
    )
