"""Products and partial sums that underflow in the accumulator: each loses up to half its smallest subnormal,
in absolute terms, n of them at most per output element (every family that sums; an elementwise op sums
nothing)."""

from __future__ import annotations

from gpuemu_ci import dtypes
from gpuemu_ci.config.model import Family, OpSpec
from gpuemu_ci.oracle.terms import Allowance, ForwardCase


def half_subnormal(min_subnormal: float) -> float:
    """Half the smallest subnormal, the largest rounding error at zero; float64's own half rounds to 0 (a tie to
    even), which would leave no allowance at all there, so it is one whole subnormal instead."""
    return min_subnormal / 2.0 or min_subnormal


def accumulator_floor(op: OpSpec, case_dtype: str) -> float:
    """Half the accumulator's smallest subnormal (the declared accumulator, float32 for 16-bit cases, else the
    case dtype); 0 for an integer one."""
    name = op.error_model.accumulator or ("float32" if case_dtype in ("float16", "bfloat16") else case_dtype)
    info = dtypes.info(name)
    return half_subnormal(info.min_subnormal) if info.is_float else 0.0


class AccumulatorUnderflow:
    """The bound term of products and partial sums underflowing in the accumulator (module docstring)."""

    name = "accumulator_underflow"
    models = "n products or partial sums underflowing in the accumulator, half its smallest subnormal each"

    def applies(self, case: ForwardCase) -> bool:
        """Every family but elementwise."""
        return case.family is not Family.ELEMENTWISE

    def allowance(self, case: ForwardCase) -> Allowance:
        """n x accumulator_floor."""
        return case.n * accumulator_floor(case.op, case.bound.case_dtype)

    def words(self, case: ForwardCase) -> str:
        """Nothing: the message's allowance figure says it."""
        return ""


TERM = AccumulatorUnderflow()
