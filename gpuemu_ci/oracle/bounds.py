"""The a-priori error bound per op family:

    |y - r| <= c * (u_out |r| + g(n) u_acc S + k_f u_acc |r| + eta)

with S and n from the family, c = 4, u the unit roundoff of the output and accumulator dtypes, eta half the
output dtype's smallest subnormal (its smallest normal when the op allows flush-to-zero).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from math import prod, sqrt
from typing import SupportsFloat

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.config.model import Family, OpSpec
from gpuemu_ci.oracle.accumulator_floor import half_subnormal
from gpuemu_ci.oracle.forward_terms import FORWARD_TERMS
from gpuemu_ci.oracle.precision import input_magnitude
from gpuemu_ci.oracle.terms import ForwardCase, add_terms, row_axis


@dataclass(frozen=True)
class BoundInputs:
    """What a family's bound needs about one case, all in float64."""

    reference: np.ndarray
    inputs: Mapping[str, np.ndarray]  # the rounded inputs, as float64
    reference_abs: np.ndarray | None  # the reference on |linear inputs|: |A||B|, sum |x|, P|V|
    dims: Mapping[str, int]
    kwargs: Mapping[str, object]
    output_dtype: str
    case_dtype: str
    # Sorted values or addends repeated along the summed dim make rounding errors correlated: sqrt(n) no
    # longer bounds them, n does (Higham's deterministic gamma_n).
    correlated: bool = False
    # The unit roundoff of a matrix product's inputs when the kernel rounds them (a Triton `tl.dot` on fp32 in
    # TF32, its GPU default: 2^-11). Only the matmul and attention families allow for it: there TF32 is the
    # contract; a scan or a reduction computed with a TF32 dot has lost the accuracy the op promises.
    dot_input_roundoff: float = 0.0
    # Inputs the reference is linear in (probed by the judge, oracle/intermediates.py): elementwise 16-bit cases.
    linear_inputs: tuple[str, ...] = ()


def accumulator_roundoff(op: OpSpec, case_dtype: str) -> float:
    """Declared accumulator, else fp32 for 16-bit inputs (what GPU kernels do), else the dtype itself."""
    if op.error_model.accumulator:
        return dtypes.info(op.error_model.accumulator).unit_roundoff
    if case_dtype in ("float16", "bfloat16"):
        return dtypes.info("float32").unit_roundoff
    info = dtypes.info(case_dtype)
    return info.unit_roundoff if info.is_float else dtypes.info("float32").unit_roundoff


def floor_term(op: OpSpec, output_dtype: str) -> float:
    """eta: the largest rounding error at zero in the output dtype (half its smallest subnormal; its smallest
    normal when the op declares flush_to_zero)."""
    info = dtypes.info(output_dtype)
    return info.min_normal if op.error_model.flush_to_zero else half_subnormal(info.min_subnormal)


def abs_linear_inputs(op: OpSpec) -> tuple[str, ...]:
    """Inputs the reference is linear in, for the |.|-reference that yields S."""
    if op.error_model.family in (Family.MATMUL, Family.REDUCTION, Family.SCAN, Family.ARGMAX):
        return tuple(spec.name for spec in op.shapes.inputs)
    if op.error_model.family is Family.ATTENTION and op.shapes.inputs:
        return (op.shapes.inputs[-1].name,)
    return ()


def reduced_dims(op: OpSpec) -> frozenset[str]:
    """Dims the op sums over: those of the inputs missing from the output (matmul, reductions, attention),
    else the last dim of the first input (row-wise families)."""
    if (
        op.error_model.family in (Family.MATMUL, Family.REDUCTION, Family.ATTENTION, Family.ARGMAX)
        and op.shapes.output_dims is not None
    ):
        output_names = {d for d in op.shapes.output_dims if isinstance(d, str)}
        return frozenset(
            d for spec in op.shapes.inputs for d in spec.dims if isinstance(d, str) and d not in output_names
        )
    first = op.shapes.inputs[0] if op.shapes.inputs else None
    if first is None or not first.dims or not isinstance(first.dims[-1], str):
        return frozenset()
    return frozenset({first.dims[-1]})


def constant_along_reduction(op: OpSpec, broadcast: Mapping[str, int]) -> bool:
    """True when an input laid out with stride 0 along one of its dims (name -> axis) is constant along a dim
    the op sums over: the addends repeat, so their rounding errors repeat too."""
    reduced = reduced_dims(op)
    specs = {spec.name: spec for spec in op.shapes.inputs}
    for name, axis in broadcast.items():
        spec = specs.get(name)
        if spec is not None and 0 <= axis < len(spec.dims) and spec.dims[axis] in reduced:
            return True
    return False


def contracted_length(op: OpSpec, dims: Mapping[str, int], reference: np.ndarray) -> int:
    """n: the product of dims that appear in the inputs but not in the output (K for matmul, the reduced length
    for reductions, N_kv for attention); the last dim for row-wise families."""
    if op.error_model.family in (Family.SOFTMAX, Family.NORM, Family.SCAN, Family.ELEMENTWISE):
        first = op.shapes.inputs[0] if op.shapes.inputs else None
        if first is None or not first.dims:
            return 1
        last = first.dims[-1]
        return max(1, dims[last] if isinstance(last, str) else last)
    if op.shapes.output_dims is not None:
        output_names = {d for d in op.shapes.output_dims if isinstance(d, str)}
        contracted = {
            d for spec in op.shapes.inputs for d in spec.dims if isinstance(d, str) and d not in output_names
        }
        return max(1, prod(dims[d] for d in contracted)) if contracted else 1
    sizes = [
        int(np.prod([dims[d] if isinstance(d, str) else d for d in spec.dims])) for spec in op.shapes.inputs
    ]
    return max(1, max(sizes, default=1) // max(reference.size, 1))


def group_rows(x: np.ndarray, kwargs: Mapping[str, object]) -> np.ndarray | None:
    """x as (samples, groups, the group's values) where a `num_groups` kwarg says a norm's statistics run over
    groups of channels (axis 1), as torch's group_norm; None otherwise."""
    groups = kwargs.get("num_groups")
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1 or x.ndim < 2:
        return None
    if x.shape[1] % groups:
        return None
    return np.asarray(x.reshape(x.shape[0], groups, -1))


def statistic_rows(
    op: OpSpec, kwargs: Mapping[str, object], output: np.ndarray, reference: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """A norm's output (or x's gradient) and its reference with each group's values on one row, where a
    `num_groups` kwarg says the statistics run over groups of channels; unchanged otherwise (the last axis is
    the row). The bias test takes a row as one sample: the rows of one group share its mean and rstd, so they
    lean together (torch's bfloat16 group norm backward reads back an rstd rounded to bfloat16 and leans -0.6 to
    -0.8 ulp on all three channels of one group) and are one sample, not three."""
    if op.error_model.family is not Family.NORM or np.shape(output) != np.shape(reference):
        return output, reference
    rows = group_rows(np.asarray(output), kwargs)
    if rows is None:
        return output, reference
    flat = (-1, rows.shape[-1])
    return rows.reshape(flat), np.asarray(reference).reshape(flat)


def allowed_error(op: OpSpec, case: BoundInputs) -> np.ndarray:
    """Per-element allowance for the BOUND comparator (same shape as the reference): the family's own term,
    plus every term of forward_terms.FORWARD_TERMS that applies, in the list's order. The one entry point for
    what each element of an output may err by."""
    r = np.abs(case.reference)
    u_out = dtypes.info(case.output_dtype).unit_roundoff if dtypes.info(case.output_dtype).is_float else 0.0
    eta = floor_term(op, case.output_dtype) if dtypes.info(case.output_dtype).is_float else 0.0
    term_case = forward_case(op, case)
    term = add_terms(FORWARD_TERMS, *_family_term(term_case))
    return np.asarray(op.error_model.bound_c * (u_out * r + term + eta))


def forward_case(
    op: OpSpec,
    case: BoundInputs,
    *,
    words_only: bool = False,
    output: np.ndarray | None = None,
    first_dims: tuple[str | int, ...] | None = None,
) -> ForwardCase:
    """The case as the forward bound's terms see it. For the words of a failure (`words_only`, with the
    `output` and `first_dims`), n is not worked out: no term's words read it, and a custom family's dims need
    not give it."""
    n = 1 if words_only else contracted_length(op, case.dims, case.reference)
    family = op.error_model.family or Family.ELEMENTWISE
    u_acc = accumulator_roundoff(op, case.case_dtype)
    return ForwardCase(op, case, family, u_acc, n, output=output, first_dims=first_dims)


def _family_term(case: ForwardCase) -> tuple[ForwardCase, np.ndarray]:
    """The family's own term (module docstring's g(n) u_acc S + k_f u_acc |r|, each family's S), and the case
    with the family's scale S where it has one."""
    op, b, r, n, u_acc = case.op, case.bound, case.absolute, case.n, case.u_acc
    k_f = op.error_model.transcendental_ulps
    g = float(n) if b.correlated else sqrt(n)
    family = case.family
    if family is Family.ELEMENTWISE:
        # Internal cancellation is bounded by the operands' magnitude: the inputs that feed each element (by
        # shape, broadcasting or dim names), so an output shaped like no input (concat(q', k')) keeps it too.
        magnitude = input_magnitude(op, b.inputs, r.shape)
        scale = r if magnitude is None else np.maximum(r, magnitude)
        return case, (1.0 + k_f) * u_acc * scale
    if family in (Family.MATMUL, Family.REDUCTION, Family.SCAN, Family.ARGMAX):
        scale = np.abs(b.reference_abs) if b.reference_abs is not None else r * n
        if family is Family.REDUCTION:
            # A statistic computed from a computed mean (a variance, a std) errs by the mean's error, about
            # g u mean|x|, even where the statistic is 0 (the std of a constant row): the square root does not
            # shrink it. The reference on |x| is 0 there.
            mean = input_magnitude(op, b.inputs, r.shape, np.mean)
            if mean is not None:
                scale = np.maximum(scale, mean)
        return replace(case, scale=scale), g * u_acc * scale + k_f * u_acc * r
    if family is Family.SOFTMAX:
        x = next(iter(b.inputs.values()))
        spread = np.zeros_like(r)
        if x.shape == r.shape and x.size:
            finite = np.where(np.isfinite(x), x, 0.0)
            spread = np.abs(finite - finite.max(axis=row_axis(b.kwargs), keepdims=True))
        return case, (k_f + 2.0 + sqrt(n)) * u_acc * r + u_acc * r * spread
    if family is Family.NORM:
        return case, (g + 2.0 + k_f) * u_acc * np.maximum(_norm_scale(b, r), r)
    if family is Family.ATTENTION:
        return case, _attention_term(b, r, n, u_acc, k_f)
    # CUSTOM goes through error_scale hooks (oracle/judge.py); EXACT never gets here
    return case, (1.0 + k_f) * u_acc * r


def _norm_scale(b: BoundInputs, r: np.ndarray) -> np.ndarray:
    """A norm's S: (mean|x| + |x|) / sigma per row, times gamma, plus the shift."""
    x = next(iter(b.inputs.values()))
    # Outputs shaped unlike the normalised input (concat(q', k')): the magnitude of each output row.
    scale = r.copy() if x.shape == r.shape else np.broadcast_to(r.max(axis=-1, keepdims=True), r.shape)
    if x.shape == r.shape and x.size:
        axis = row_axis(b.kwargs)
        eps = _float_kwarg(b.kwargs, "eps")
        grouped = group_rows(x, b.kwargs)  # group_norm: statistics over groups of channels
        rows, stat_axis = (grouped, -1) if grouped is not None else (x, axis)
        mean = rows.mean(axis=stat_axis, keepdims=True)
        sigma = np.sqrt(((rows - mean) ** 2).mean(axis=stat_axis, keepdims=True) + eps)
        sigma = np.where(sigma > 0, sigma, 1.0)
        # The computed mean errs in proportion to the row's mean |x|, not |mean| (rows can cancel).
        mean_abs = np.abs(rows).mean(axis=stat_axis, keepdims=True)
        gamma, shift = _affine(b.inputs, x, 1 if grouped is not None else axis)
        scale = ((mean_abs + np.abs(rows)) / sigma).reshape(x.shape) * gamma + shift
    return scale


def _attention_term(b: BoundInputs, r: np.ndarray, n: int, u_acc: float, k_f: float) -> np.ndarray:
    """Attention's own term: the scores' roundings through exp and P V's, rounded dot inputs, and P rounded to a
    16-bit input dtype before P @ V."""
    tensors = list(b.inputs.values())
    q, k = (tensors[0], tensors[1]) if len(tensors) >= 3 else (tensors[0], tensors[0])
    qk = _max_row_norm(q) * _max_row_norm(k)
    sixteen = b.case_dtype in ("float16", "bfloat16")
    u_p = dtypes.info(b.case_dtype).unit_roundoff if sixteen else u_acc
    pv = b.reference_abs if b.reference_abs is not None else r
    term = (u_p + sqrt(n) * u_acc + 2.0 * u_acc * qk + k_f * u_acc) * np.abs(pv)
    # Rounded dot inputs: the scores err by 2u|q||k| (through exp, relatively), P V by 2u|P||V|.
    term = term + 2.0 * b.dot_input_roundoff * (1.0 + qk) * np.abs(pv)
    # P is rounded to the input dtype before P @ V: where P is subnormal there its error is absolute
    # (half the smallest subnormal), so add eta_p * sum_j |v_j| (v's keys run along axis -2).
    v = tensors[-1]
    if sixteen and v.ndim >= 2 and v.shape[-1] == r.shape[-1]:
        eta_p = dtypes.info(b.case_dtype).min_subnormal / 2.0
        v_sum = np.abs(np.where(np.isfinite(v), v, 0.0)).sum(axis=-2, keepdims=True)
        try:
            term = term + eta_p * np.broadcast_to(v_sum, r.shape)
        except ValueError:
            term = term + eta_p * float(v_sum.max(initial=0.0))
    return np.asarray(term)


def _float_kwarg(kwargs: Mapping[str, object], name: str) -> float:
    """A numeric kwarg as a float, 0 where absent or falsy."""
    value = kwargs.get(name, 0.0) or 0.0
    if not isinstance(value, SupportsFloat | str):
        raise TypeError(f"kwarg `{name}` = {value!r} is not a number")
    return float(value)


_SHIFT_NAMES = ("bias", "beta", "shift", "b")


def _affine(inputs: Mapping[str, np.ndarray], x: np.ndarray, axis: int) -> tuple[float, np.ndarray]:
    """The per-column parameters of a norm: 1-D inputs as long as the normalised axis. Those named like a
    bias (`bias`, `beta`, `shift`, `b`) are added to the row; the others scale it (gamma, at least 1)."""
    length = x.shape[axis]
    per_column = [(n, w) for n, w in inputs.items() if w is not x and w.ndim == 1 and w.shape[0] == length]
    shape = [1] * x.ndim
    shape[axis] = length
    gamma = 1.0
    shift = np.zeros(1)
    for name, w in per_column:
        if name.lower() in _SHIFT_NAMES:
            shift = shift + np.abs(w).reshape(shape)
        else:
            gamma = max(gamma, float(np.abs(w).max(initial=0.0)))
    return gamma, shift


def _max_row_norm(x: np.ndarray) -> float:
    if x.size == 0:
        return 0.0
    finite = np.where(np.isfinite(x), x, 0.0)
    return float(np.sqrt((finite * finite).sum(axis=-1)).max())


def custom_allowance(
    op: OpSpec, reference: np.ndarray, scale: np.ndarray, n: int, case_dtype: str, output_dtype: str
) -> np.ndarray:
    """family = "custom": the user's hook gave S and n."""
    u_out = dtypes.info(output_dtype).unit_roundoff
    u_acc = accumulator_roundoff(op, case_dtype)
    r = np.abs(reference)
    return np.asarray(
        op.error_model.bound_c
        * (
            u_out * r
            + sqrt(max(n, 1)) * u_acc * np.abs(scale)
            + op.error_model.transcendental_ulps * u_acc * r
            + floor_term(op, output_dtype)
        )
    )
