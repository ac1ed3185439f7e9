"""A matrix product whose inputs the kernel rounds before multiplying (a Triton `tl.dot` on fp32 inputs in TF32,
its GPU default: u = 2^-11): 2u per product relative to |a||b|, and below fp32's smallest normal an absolute
u * 2^-126 per input, times the largest other operand, n times. Only the matmul family's bound counts it here
(attention's own bound counts its two products); a scan or a reduction computed with a TF32 dot has lost the
accuracy the op promises."""

from __future__ import annotations

import numpy as np

from gpuemu_ci.config.model import Family
from gpuemu_ci.oracle.terms import Allowance, ForwardCase

_FP32_MIN_NORMAL = 2.0**-126


class RoundedDotInputs:
    """The bound term of a matrix product's rounded inputs (module docstring)."""

    name = "rounded_dot_inputs"
    models = "a matmul's inputs rounded before the product (TF32 `tl.dot`)"

    def applies(self, case: ForwardCase) -> bool:
        """Matmul cases whose kernel ran its dots on rounded inputs."""
        return case.family is Family.MATMUL and bool(case.bound.dot_input_roundoff)

    def allowance(self, case: ForwardCase) -> Allowance:
        """2u S + u 2^-126 n max|operands|."""
        u = case.bound.dot_input_roundoff
        scale = case.scale if case.scale is not None else case.absolute * case.n
        largest = sum(
            float(np.max(np.abs(np.where(np.isfinite(x), x, 0.0)), initial=0.0))
            for x in case.bound.inputs.values()
        )
        return np.asarray(2.0 * u * scale + u * _FP32_MIN_NORMAL * case.n * largest)

    def words(self, case: ForwardCase) -> str:
        """Nothing: the results name the dot's precision (triton_dot_precisions)."""
        return ""


TERM = RoundedDotInputs()
