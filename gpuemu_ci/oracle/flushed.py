"""Subnormal inputs and products of a matrix product that the hardware treats as zero (issue #32).

bfloat16 dot-product instructions flush by definition: Intel's AVX512-BF16 `vdpbf16ps` and AMX `tdpbf16ps` (and
Arm's `bfdot` without FEAT_EBF16) treat subnormal inputs as zero and flush subnormal results, whatever the
floating-point control register says. PyTorch's CPU bf16 GEMM runs on them above a few elements: its 13x33 @ 33x15
product of rows of ~1e10 with a column of bf16 subnormals (3.7e-40) returns 0 where the exact answer is 1.1e-29
(its 2x2 product, computed without them, returns 1.1e-29).

So for bfloat16 cases of the `matmul` family (and any dtype when the op declares `flush_to_zero = true`):

- an input below its dtype's smallest normal may count as 0: each of the n products it feeds loses up to
  `min_normal × |other factor|`, bounded by `n × min_normal × max|operand|` per output element, the largest operand
  that feeds that element (only in cases that hold such an input);
- a product or partial sum below the accumulator's smallest normal may be flushed: `n × min_normal(accumulator)`
  instead of the half subnormals the bound allows under gradual underflow.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.config.model import Family, OpSpec
from gpuemu_ci.oracle.model import Comparator
from gpuemu_ci.oracle.precision import input_magnitude
from gpuemu_ci.oracle.terms import Allowance, ForwardCase, GradientTermCase


def flushes(op: OpSpec, case_dtype: str) -> bool:
    """Whether the op's products may treat subnormals as zero: bfloat16 matrix products (attention's two among
    them), or a declared `flush_to_zero`."""
    if op.error_model.family not in (Family.MATMUL, Family.ATTENTION):
        return False
    return case_dtype == "bfloat16" or op.error_model.flush_to_zero


def _accumulator_min_normal(op: OpSpec, case_dtype: str) -> float:
    """The smallest normal of the accumulator the products are summed in (float32 for 16-bit cases)."""
    name = op.error_model.accumulator or ("float32" if case_dtype in ("float16", "bfloat16") else case_dtype)
    return float(dtypes.info(name).min_normal)


def _magnitudes_if_subnormal(
    operands: Iterable[np.ndarray | None], case_dtype: str
) -> list[np.ndarray] | None:
    """The operands' finite magnitudes when one of them holds a value below the dtype's smallest normal."""
    smallest = dtypes.info(case_dtype).min_normal
    arrays = [np.asarray(a, dtype=np.float64) for a in operands if a is not None and np.size(a)]
    finite = [np.abs(np.where(np.isfinite(a), a, 0.0)) for a in arrays]
    return finite if any(np.any((a > 0) & (a < smallest)) for a in finite) else None


def dot_term(
    op: OpSpec, case_dtype: str, inputs: Mapping[str, np.ndarray], n: int, out_shape: tuple[int, ...]
) -> np.ndarray | float:
    """The absolute allowance (before c) for flushed subnormal inputs and products (module docstring); 0 where the
    op does not flush."""
    if not flushes(op, case_dtype):
        return 0.0
    term: np.ndarray | float = n * _accumulator_min_normal(op, case_dtype)
    finite = _magnitudes_if_subnormal(inputs.values(), case_dtype)
    if finite is not None:
        # The other factor of a flushed product: per output element, the largest operand that feeds it (aligned
        # by dim names), so a row of 1e38 elsewhere in the case does not widen this element's allowance.
        largest = input_magnitude(op, inputs, out_shape)
        if largest is None:
            largest = np.asarray(max(float(a.max(initial=0.0)) for a in finite))
        term = term + n * dtypes.info(case_dtype).min_normal * largest
    return term


def gradient_term(
    op: OpSpec, case_dtype: str, inputs: Iterable[np.ndarray], upstream: Iterable[np.ndarray | None], n: int
) -> float:
    """The absolute allowance (before c) of a flushing product's gradient (a matmul's `g @ b^T`, a convolution's
    weight gradient): the forward's operands and the upstream gradient, any of them below its dtype's smallest
    normal, may count as 0 in each of the n products that form an element, against the largest other operand, and
    n products or partial sums may be flushed below the accumulator's smallest normal. PyTorch's bfloat16 conv1d
    weight gradient is 0 where an upstream bf16 subnormal (-1.8e-40) times 8.6e9 gives -1.6e-30. 0 where the op
    does not flush."""
    if not flushes(op, case_dtype):
        return 0.0
    term = n * _accumulator_min_normal(op, case_dtype)
    finite = _magnitudes_if_subnormal((*inputs, *upstream), case_dtype)
    if finite is not None:
        term += n * dtypes.info(case_dtype).min_normal * max(float(a.max(initial=0.0)) for a in finite)
    return term


def attention_term(op: OpSpec, case_dtype: str, n: int) -> float:
    """The absolute allowance (before c) for attention's P @ V on flushing dot instructions; 0 where the op does not
    flush. Per output element: V elements below the smallest normal counted as 0 lose sum_j P_ij |v_jd| <
    min_normal (the weights sum to 1), and n products or partial sums flushed below the accumulator's smallest
    normal lose up to n of those (weights below it are attention_floor's). PyTorch's bfloat16 attention of rows
    of V at -3.7e-40 (bfloat16 subnormals) returns 0."""
    if not flushes(op, case_dtype):
        return 0.0
    return dtypes.info(case_dtype).min_normal + n * _accumulator_min_normal(op, case_dtype)


def note(op: OpSpec, case_dtype: str) -> str:
    """What the allowance includes, for a failure message."""
    if not flushes(op, case_dtype):
        return ""
    why = "bfloat16 dot products flush them" if case_dtype == "bfloat16" else "the op declares flush_to_zero"
    return (
        f"; it allows subnormal inputs treated as zero and products flushed below the accumulator's smallest normal "
        f"({why}: n × min_normal × the largest operands)"
    )


class FlushedProducts:
    """The bound term of products that treat subnormals as zero (module docstring)."""

    name = "flushed_products"
    models = "subnormal inputs and products flushed to zero (bfloat16 dot instructions, flush_to_zero)"

    def applies(self, case: ForwardCase) -> bool:
        """Matrix products (attention's among them) that flush."""
        return flushes(case.op, case.bound.case_dtype)

    def allowance(self, case: ForwardCase) -> Allowance:
        """dot_term for a matmul, attention_term for attention."""
        b = case.bound
        if case.family is Family.ATTENTION:
            return attention_term(case.op, b.case_dtype, case.n)
        return dot_term(case.op, b.case_dtype, b.inputs, case.n, b.reference.shape)

    def words(self, case: ForwardCase) -> str:
        """note()."""
        return note(case.op, case.bound.case_dtype)


class FlushedGradientProducts:
    """The gradient's bound term of products that treat subnormals as zero (gradient_term)."""

    name = "flushed_products"
    models = "a flushing product's gradient: operands and upstream gradient below the normal range as zero"

    def applies(self, case: GradientTermCase) -> bool:
        """Gradients of matrix products that flush."""
        return flushes(case.op, case.dtype)

    def allowance(self, case: GradientTermCase) -> Allowance:
        """gradient_term()."""
        return gradient_term(case.op, case.dtype, case.inputs.values(), case.upstream, case.n)

    def words(self, case: GradientTermCase) -> str:
        """note(), where the structure bound judged the gradient and it exceeded its allowance."""
        return note(case.op, case.dtype) if case.mismatched and case.rule is Comparator.BOUND else ""


TERM = FlushedProducts()
GRADIENT_TERM = FlushedGradientProducts()
