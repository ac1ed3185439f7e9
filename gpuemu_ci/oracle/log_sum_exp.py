"""A log-sum-exp reduction evaluated in a 16-bit case dtype, one rounded intermediate at a time (issue #32).

PyTorch's CPU `torch.logsumexp` on float16/bfloat16 computes `m = max(x)`, then `x - m`, `exp`, the sum, its `log`
and `log + m`, each a tensor in the inputs' dtype (measured: its output equals that sequence evaluated in 16 bits
bit for bit). The answer can cancel (all-negative rows: m = -1.9, log s = 1.88, lse = -0.016) while every one of
those intermediates is O(1), so the float32 reduction bound misses roundings far larger than the output. Where
the op rounds its intermediates to the case dtype (a 16-bit case without a declared accumulator,
oracle/intermediates.py) and its reference is the log-sum-exp of the rows of an input, the allowance counts, with
u the case dtype's unit roundoff, p_i = exp(x_i - lse) and s = sum exp(x_i - m):

- `x_i - m` rounded: relative u on each exponent, so log s moves by u sum p_i (m - x_i) = u W;
- each `exp` rounded, and the sum rounded: relative u each, an absolute u each on log s (2 u);
- `log s` rounded: u log s;
- `log s + m` rounded: u |lse|, the output's own rounding, which the bound already counts.

So u (log s + W + 2) per row. Measured on torch's kernel (rows of 1 to 300 values: all-negative, unit, wide,
offset by up to 100), the error beyond the output's rounding stays below 0.66 of it; a model at the scale of
|m| + log s alone (rounding the log of the sum and the addition of the max) is exceeded 4x on float16 rows whose
max is near 0.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.config.model import Family, OpSpec
from gpuemu_ci.oracle.intermediates import rounds_in_case_dtype
from gpuemu_ci.oracle.terms import Allowance, ForwardCase, OfFamilies

# How closely the float64 reference must equal the rows' log-sum-exp for the model to apply.
FORM_TOLERANCE = 1e-9
# exp of each term and the sum, each rounded once relative to the sum: an absolute error of u each in log s.
RELATIVE_ROUNDINGS = 2.0


def _rows_of(reference: np.ndarray, inputs: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """The input whose rows (over its last axis) give one output element each, as (rows, length); None if none."""
    for x in inputs.values():
        x = np.asarray(x, dtype=np.float64)
        if x.ndim >= 1 and x.shape[-1] >= 1 and int(np.prod(x.shape[:-1])) == reference.size and x.size:
            return x.reshape(-1, x.shape[-1])
    return None


def term(
    op: OpSpec, case_dtype: str, reference: np.ndarray, inputs: Mapping[str, np.ndarray]
) -> np.ndarray | float:
    """u (log s + W + 2) per output element (module docstring); 0 where the op does not round in the case dtype or
    its reference is not the rows' log-sum-exp."""
    if op.error_model.family is not Family.REDUCTION or not rounds_in_case_dtype(op, case_dtype):
        return 0.0
    r = np.asarray(reference, dtype=np.float64)
    x = _rows_of(r, inputs)
    if x is None or not np.all(np.isfinite(x)) or not np.all(np.isfinite(r)):
        return 0.0
    with np.errstate(all="ignore"):
        m = x.max(axis=-1, keepdims=True)
        shifted = x - m
        log_s = np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        lse = (m + log_s).reshape(r.shape)
        if not np.all(np.abs(r - lse) <= FORM_TOLERANCE * (np.abs(m) + log_s).reshape(r.shape)):
            return 0.0
        p = np.exp(shifted - log_s)
        spread = (p * -shifted).sum(axis=-1, keepdims=True)
    u = dtypes.info(case_dtype).unit_roundoff
    return np.asarray(u * (log_s + spread + RELATIVE_ROUNDINGS)).reshape(r.shape)


def note(op: OpSpec, case_dtype: str, reference: np.ndarray, inputs: Mapping[str, np.ndarray]) -> str:
    """What the allowance includes, for a failure message; empty where `term` is 0."""
    if np.all(np.asarray(term(op, case_dtype, reference, inputs)) == 0.0):
        return ""
    return (
        f"; the bound counts the {case_dtype} roundings of a log-sum-exp's intermediates (no accumulator "
        "declared): x - max, exp, the sum and its log, u (log s + sum p (max - x) + 2) per row"
    )


class LogSumExpIntermediates(OfFamilies):
    """The bound term of a log-sum-exp computed one rounded 16-bit intermediate at a time (module docstring)."""

    families = frozenset({Family.REDUCTION})
    name = "log_sum_exp"
    models = "a log-sum-exp's x - max, exp, sum and log each rounded to a 16-bit case dtype"

    def allowance(self, case: ForwardCase) -> Allowance:
        """term()."""
        b = case.bound
        return term(case.op, b.case_dtype, b.reference, b.inputs)

    def words(self, case: ForwardCase) -> str:
        """note()."""
        b = case.bound
        return note(case.op, b.case_dtype, b.reference, b.inputs)


TERM = LogSumExpIntermediates()
