"""What attention's forward loses below the working precision's normal range, in absolute terms.

- exp flushes subnormal results to zero (`ex2.approx.ftz` on GPUs, vectorised exp on CPUs): each P_ij below the
  smallest normal may be lost, an error up to that normal times |v_j| per key.
- Each product P_ij v_jd that underflows loses up to half the smallest subnormal: n of them at most. Computed as
  n x subnormal / 2, not n x (subnormal / 2), which rounds to 0 in float64.
"""

from __future__ import annotations

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.config.model import Family, OpSpec
from gpuemu_ci.oracle.terms import Allowance, ForwardCase, OfFamilies


def underflow_term(
    op: OpSpec, case_dtype: str, v: np.ndarray, shape: tuple[int, ...], n: int
) -> np.ndarray | float:
    """min_normal(w) sum_j |v_jd| + n min_subnormal(w) / 2, w the working precision (the declared accumulator,
    else float32 for 16-bit cases, else the case dtype), broadcast to the output's `shape` where v's keys run
    along its axis -2 (a scalar bound from the largest sum otherwise)."""
    sixteen = case_dtype in ("float16", "bfloat16")
    info = dtypes.info(op.error_model.accumulator or ("float32" if sixteen else case_dtype))
    products = n * info.min_subnormal / 2.0
    if v.ndim < 2:
        return products
    v_sum = np.abs(np.where(np.isfinite(v), v, 0.0)).sum(axis=-2, keepdims=True)
    try:
        return info.min_normal * np.broadcast_to(v_sum, shape) + products
    except ValueError:
        return info.min_normal * float(v_sum.max(initial=0.0)) + products


class AttentionUnderflow(OfFamilies):
    """The bound term of attention's weights and products below the working precision's normal range."""

    families = frozenset({Family.ATTENTION})
    name = "attention_underflow"
    models = "attention's exp flushed below the normal range and P v products underflowing"

    def allowance(self, case: ForwardCase) -> Allowance:
        """underflow_term() with v the last input."""
        b = case.bound
        v = list(b.inputs.values())[-1]
        return underflow_term(case.op, b.case_dtype, v, b.reference.shape, case.n)

    def words(self, case: ForwardCase) -> str:
        """Nothing: the message's allowance figure says it."""
        return ""


TERM = AttentionUnderflow()
