"""Intermediates rounded to a 16-bit case dtype: ops composed of several operations, evaluated one by one in the
inputs' dtype.

An op without a declared accumulator is modelled as computing in float32 and rounding once (oracle/bounds.py).
A composed op written with framework operations in the case's dtype rounds every intermediate to 16 bits
instead: PyTorch's `kl_div` rounds `log(target)`, then the difference, then the product; a rotary embedding
rounds its cos/sin tables to x's dtype, then each product, then their sum. Each such rounding errs by u (the
case dtype's unit roundoff) relative to the intermediate, which may be far larger than the output (x·cos and
rot·sin cancel; target·log(target) and target·logp cancel). So for 16-bit cases without a declared accumulator
(`accumulator = "float32"` turns this off: then the op promises float32 intermediates):

- `elementwise`: ROUNDINGS roundings of u at the scale of the terms the op combines: the reference on |inputs|
  (products and sums of the operands at their magnitude), and for inputs the reference is linear in (a
  rotation, a projection: y = sum a_j x_j, whose coefficients the op computes and whose signs make the
  reference on |x| cancel as well) the magnitude of those inputs. Linearity is probed, not assumed: the
  reference on the input doubled (exact in binary floating point) must return exactly twice its answer.
  The reference itself is never evaluated in 16 bits: positions rounded to fp16 give rotary angles 0.25 rad
  off, which would hide bugs.
- `softmax` rows in the log domain (every reference element <= 0: a log-softmax): x - lse formed from
  operands rounded to 16 bits errs by u (|x| + |lse|) in absolute terms, lse = x - r; and the row's sum of
  exponentials and its log stored in 16 bits, as PyTorch's kernel does, by u (1 + log s)
  (oracle/stored_log_sum.py).
- a `reduction` that picks one element per row by a class-target index (an index input whose `high` is the
  reduced dim: a cross-entropy, an NLL loss): PyTorch's cross-entropy rounds log_softmax(x) to 16 bits and
  picks the target's, so the loss errs by one rounding at |x_t| + |lse| <= |r| + 2 max|x| (lse = r + x_t, the
  row's largest |x| as the magnitude of the inputs that feed each loss).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.config.model import Family, InputSpec, OpSpec, ValueKind
from gpuemu_ci.oracle import stored_log_sum
from gpuemu_ci.oracle.precision import input_magnitude
from gpuemu_ci.oracle.terms import Allowance, ForwardCase, GradientTermCase, row_axis

# A function value (a cos, a log), a product and a sum, each rounded once at the terms' scale.
ROUNDINGS = 3.0
# x - max and the log-sum-exp it subtracts, each rounded once.
LOG_DOMAIN_ROUNDINGS = 2.0
# The picked log-probability x_t - lse, rounded once at |x_t| + |lse| <= |r| + 2 max|x|.
PICKED_ROUNDINGS = 1.0
SIXTEEN_BIT = ("float16", "bfloat16")


def rounds_in_case_dtype(op: OpSpec, case_dtype: str) -> bool:
    """Whether the op may round its intermediates to the case dtype: a 16-bit case, no declared accumulator."""
    return case_dtype in SIXTEEN_BIT and not op.error_model.accumulator


def probed_inputs(op: OpSpec, case_dtype: str) -> tuple[str, ...]:
    """The float inputs of an elementwise op in a 16-bit case without accumulator: the reference is run on
    their |x| (the terms' scale) and on each of them doubled (the linearity probe)."""
    if op.error_model.family is not Family.ELEMENTWISE or not rounds_in_case_dtype(op, case_dtype):
        return ()
    return tuple(
        spec.name
        for spec in op.shapes.inputs
        if spec.dtype is None or (spec.dtype in dtypes.DTYPES and dtypes.info(spec.dtype).is_float)
    )


def linear_in(reference: Sequence[np.ndarray], doubled: Sequence[np.ndarray]) -> bool:
    """Whether the reference run on one input doubled returned exactly twice its answer (and not only zeros)."""
    if len(reference) != len(doubled) or not reference:
        return False
    for r, d in zip(reference, doubled, strict=True):
        r, d = np.asarray(r, dtype=np.float64), np.asarray(d, dtype=np.float64)
        if r.shape != d.shape or not np.array_equal(2.0 * r, d, equal_nan=True):
            return False
    return any(np.any(np.asarray(r, dtype=np.float64) != 0) for r in reference)


def elementwise_term(
    op: OpSpec,
    case_dtype: str,
    reference: np.ndarray,
    reference_abs: np.ndarray | None,
    inputs: Mapping[str, np.ndarray],
    linear: Sequence[str],
) -> np.ndarray | float:
    """ROUNDINGS u S, S the terms' scale (module docstring); 0 where the op does not round in the case dtype."""
    if not rounds_in_case_dtype(op, case_dtype):
        return 0.0
    scale = np.abs(np.where(np.isfinite(reference), reference, 0.0))
    if reference_abs is not None and reference_abs.shape == scale.shape:
        scale = np.maximum(scale, np.abs(np.where(np.isfinite(reference_abs), reference_abs, 0.0)))
    chosen = {name: inputs[name] for name in linear if name in inputs}
    magnitude = input_magnitude(op, chosen, scale.shape) if chosen else None
    if magnitude is not None:
        scale = np.maximum(scale, magnitude)
    return rounded_terms(op, case_dtype, scale)


def rounded_terms(
    op: OpSpec, case_dtype: str, scale: np.ndarray, products: np.ndarray | None = None
) -> np.ndarray | float:
    """ROUNDINGS u S for an elementwise op's output or gradient whose terms have the scale S, where the op
    rounds in the case dtype (kl_div's gradient `log(target) - logp + 1` with log(target) rounded to float16);
    0 elsewhere. `products`: for a gradient, |g x|, the upstream gradient times the input it is for, a product
    a 16-bit backward forms (PyTorch's kl_div computes `g * target / target`): below the dtype's normal range
    it errs by half the smallest subnormal, a relative error eta / |g x| of the terms (up to 1) instead of u."""
    if op.error_model.family is not Family.ELEMENTWISE or not rounds_in_case_dtype(op, case_dtype):
        return 0.0
    info = dtypes.info(case_dtype)
    relative: np.ndarray | float = info.unit_roundoff
    if products is not None:
        eta = info.min_subnormal / 2.0
        finite = np.where(np.isfinite(products), np.abs(products), 0.0)
        below = np.minimum(1.0, eta / np.where(finite > 0, finite, 1.0))
        relative = np.where(finite > 0, np.maximum(info.unit_roundoff, below), info.unit_roundoff)
    return ROUNDINGS * relative * scale


def log_domain_term(
    op: OpSpec, case_dtype: str, x: np.ndarray, reference: np.ndarray, axis: int
) -> np.ndarray:
    """LOG_DOMAIN_ROUNDINGS u (|x| + |lse|) on the rows whose reference is <= 0 throughout, 0 elsewhere."""
    r = np.asarray(reference, dtype=np.float64)
    if not rounds_in_case_dtype(op, case_dtype) or x.shape != r.shape or not r.size:
        return np.zeros_like(r)
    usable = np.isfinite(x) & np.isfinite(r)
    x0, r0 = np.where(usable, x, 0.0), np.where(usable, r, 0.0)
    log_rows = np.all(r0 <= 0.0, axis=axis, keepdims=True)
    operands = np.abs(x0) + np.abs(x0 - r0)
    rounded = np.where(log_rows, LOG_DOMAIN_ROUNDINGS * dtypes.info(case_dtype).unit_roundoff * operands, 0.0)
    stored = stored_log_sum.term(case_dtype, r, log_rows, axis)  # the row statistic kept in 16 bits
    return np.asarray(rounded + stored)


def class_target(op: OpSpec) -> InputSpec | None:
    """The index input that selects along a dim the output lacks (a class target: one logit per row)."""
    if op.shapes.output_dims is None:
        return None
    output = {d for d in op.shapes.output_dims if isinstance(d, str)}
    return next(
        (
            spec
            for spec in op.shapes.inputs
            if spec.kind is ValueKind.INDEX and isinstance(spec.high, str) and spec.high not in output
        ),
        None,
    )


def picks_by_index(op: OpSpec) -> bool:
    """Whether an index input selects along a dim the output lacks (a class target: one logit per row)."""
    return class_target(op) is not None


def picked_term(
    op: OpSpec, case_dtype: str, reference: np.ndarray, inputs: Mapping[str, np.ndarray]
) -> np.ndarray | float:
    """PICKED_ROUNDINGS u (|r| + 2 max|x|) for a reduction that picks by a class target (module docstring)."""
    if op.error_model.family is not Family.REDUCTION or not rounds_in_case_dtype(op, case_dtype):
        return 0.0
    if not picks_by_index(op):
        return 0.0
    r = np.abs(np.where(np.isfinite(reference), reference, 0.0))
    magnitude = input_magnitude(op, inputs, r.shape)
    if magnitude is None:
        return 0.0
    return PICKED_ROUNDINGS * dtypes.info(case_dtype).unit_roundoff * (r + 2.0 * magnitude)


def note(op: OpSpec, case_dtype: str) -> str:
    """What the allowance includes, for a failure message."""
    if not rounds_in_case_dtype(op, case_dtype):
        return ""
    if op.error_model.family is Family.ELEMENTWISE:
        return (
            f"; the bound counts {ROUNDINGS:g} {case_dtype} roundings of the op's intermediates (no accumulator "
            "declared) at the scale of its terms: the reference on |inputs| and the magnitude of the inputs it "
            "is linear in"
        )
    if op.error_model.family is Family.SOFTMAX:
        return (
            f"; on log-domain rows the bound counts {LOG_DOMAIN_ROUNDINGS:g} {case_dtype} roundings of x - lse "
            "(no accumulator declared) at |x| + |lse| " + stored_log_sum.WORDS.format(dtype=case_dtype)
        )
    if op.error_model.family is Family.REDUCTION and picks_by_index(op):
        return (
            f"; the bound counts {PICKED_ROUNDINGS:g} {case_dtype} rounding of the picked log-probability "
            "x_t - lse (no accumulator declared) at |r| + 2 max|x|"
        )
    return ""


_PICKING = frozenset({Family.MATMUL, Family.REDUCTION, Family.SCAN, Family.ARGMAX})


class RoundedIntermediates:
    """The bound term of an op rounding its intermediates to a 16-bit case dtype (module docstring): an
    elementwise op's terms, a reduction's picked values, a log-softmax row's x - lse."""

    name = "rounded_intermediates"
    models = "intermediates rounded to a 16-bit case dtype (no accumulator declared)"

    def applies(self, case: ForwardCase) -> bool:
        """Elementwise, matmul-like families, and softmax rows shaped like their input."""
        if case.family is Family.SOFTMAX:
            x = next(iter(case.bound.inputs.values()))
            return bool(x.shape == case.bound.reference.shape and x.size)
        return case.family is Family.ELEMENTWISE or case.family in _PICKING

    def allowance(self, case: ForwardCase) -> Allowance:
        """The family's own model of those roundings."""
        b = case.bound
        if case.family is Family.ELEMENTWISE:
            return elementwise_term(
                case.op, b.case_dtype, b.reference, b.reference_abs, b.inputs, b.linear_inputs
            )
        if case.family is Family.SOFTMAX:
            x = next(iter(b.inputs.values()))
            return log_domain_term(case.op, b.case_dtype, x, b.reference, row_axis(b.kwargs))
        return picked_term(case.op, b.case_dtype, b.reference, b.inputs)

    def words(self, case: ForwardCase) -> str:
        """note()."""
        return note(case.op, case.bound.case_dtype)


class RoundedGradientIntermediates:
    """The gradient's term of an elementwise op rounding its intermediates to a 16-bit case dtype
    (rounded_terms)."""

    name = "rounded_intermediates"
    models = "an elementwise backward's intermediates rounded to a 16-bit case dtype, and its |g x| products"

    def applies(self, case: GradientTermCase) -> bool:
        """Elementwise ops."""
        return case.op.error_model.family is Family.ELEMENTWISE

    def allowance(self, case: GradientTermCase) -> Allowance:
        """rounded_terms() at the structure bound's scale."""
        scale = case.scale if case.scale is not None else np.abs(case.reference)
        return rounded_terms(case.op, case.dtype, scale, case.products)

    def words(self, case: GradientTermCase) -> str:
        """Nothing: the forward's failure names them."""
        return ""


TERM = RoundedIntermediates()
GRADIENT_TERM = RoundedGradientIntermediates()
