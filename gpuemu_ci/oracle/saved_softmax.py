"""A softmax-family backward computed from the forward's output as stored, in the output's dtype (issue #32).

Autograd saves softmax's output y, rounded to its dtype, and computes the gradient from it:

- softmax, `y (g - sum_j g_j y_j)`: each saved y_i errs by u_y y_i (u_y the output dtype's unit roundoff). The
  factor y_i moves the gradient by u_y |y_i (g_i - s)| = u_y |g_ref_i|, and the sum s by u_y sum_j |g_j| y_j,
  which y_i multiplies: u_y (|g_ref| + y sum_j |g_j| y_j) in all. On a row of two values where g_1 and s
  nearly cancel (bfloat16, g = (-1.03, -1.38), y = (0.019, 0.981)) that is 50 times the gradient's own rounding,
  and PyTorch's CPU backward makes exactly it (its result equals y_saved (g - sum g y_saved) evaluated exactly,
  to 1e-6).
- log-softmax, `g - exp(y) sum_j g_j`: y errs by u_y |y|, exp(y) relatively as much: u_y |y| exp(y) |sum g|.
- A y stored below the dtype's normal range (a float16 softmax output under 6.1e-5) errs by up to half the
  subnormal spacing, more than u_y |y|: each term takes that absolute error where it is the larger, e_i =
  max(u_y |y_i|, eta_y / 2), as e_i |g_i - s| + y_i sum_j |g_j| e_j (a correct float16 softmax backward erred
  by 1.2x the relative-only allowance on a row whose y held float16 subnormals).

oracle/row_statistics.softmax_form tells the two forms apart and gives the scale of the terms a float32
backward rounds; this is the rounding of the saved output itself, which is the output dtype's, not the
accumulator's (2^-8 for bfloat16, not 2^-24).
"""

from __future__ import annotations

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.config.model import Family, OpSpec
from gpuemu_ci.oracle import row_statistics
from gpuemu_ci.oracle.row_statistics import Forward
from gpuemu_ci.oracle.terms import Allowance, GradientTermCase


def term(
    op: OpSpec, output_dtype: str, forward: Forward | None, name: str, r: np.ndarray
) -> np.ndarray | None:
    """The saved output's rounding as the gradient of `name` inherits it (module docstring), before the bound's c;
    None for other ops, inputs and shapes, and where the reference's gradient has neither form."""
    form = row_statistics.softmax_form(op, forward, name, r)
    if form is None or not dtypes.info(output_dtype).is_float:
        return None
    info = dtypes.info(output_dtype)
    u_y = info.unit_roundoff
    y, g = form.y, form.g
    with np.errstate(all="ignore"):
        # Below the dtype's normal range a stored y errs by up to half its subnormal spacing, not u_y |y|:
        # `beyond` is what that adds to u_y |y| (0 for every normal y, so the normal-range terms are unchanged).
        beyond = np.maximum(info.min_subnormal / 2.0 - u_y * np.abs(y), 0.0)
        if not form.log:
            magnitude = np.abs(np.where(np.isfinite(r), r, 0.0))
            weighted = (np.abs(g) * np.abs(y)).sum(axis=-1, keepdims=True)
            found = u_y * (magnitude + np.abs(y) * weighted)
            if np.any(beyond):
                s = (g * y).sum(axis=-1, keepdims=True)
                found = (
                    found
                    + beyond * np.abs(g - s)
                    + np.abs(y) * (np.abs(g) * beyond).sum(axis=-1, keepdims=True)
                )
            return np.asarray(found)
        found = (u_y * np.abs(y) + beyond) * np.exp(y) * np.abs(g.sum(axis=-1, keepdims=True))
        return np.asarray(np.where(np.isfinite(found), found, 0.0))


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


class SavedSoftmaxOutput:
    """The gradient's term of the softmax output saved in its dtype, which the backward computes from."""

    name = "saved_softmax_output"
    models = "a softmax's or log-softmax's output rounded to its dtype and read back by the backward"

    def applies(self, case: GradientTermCase) -> bool:
        """Gradients of the softmax family."""
        return case.op.error_model.family is Family.SOFTMAX

    def allowance(self, case: GradientTermCase) -> Allowance:
        """term(); 0 where the reference's gradient has neither softmax form."""
        found = term(case.op, _output_dtype(case), case.forward, case.name, case.reference)
        return 0.0 if found is None else found

    def words(self, case: GradientTermCase) -> str:
        """words()."""
        return words(case.op, _output_dtype(case), case.forward, case.name, case.reference, case.mismatched)


def _output_dtype(case: GradientTermCase) -> str:
    """The dtype the forward's output was saved in."""
    return case.op.output_dtype or case.dtype


TERM = SavedSoftmaxOutput()
