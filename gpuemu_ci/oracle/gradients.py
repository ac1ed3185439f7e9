"""Judging the gradients of an op declared `backward = true`: each input's gradient is an output of its own.

Two rules, and the results say which judged each gradient:

- `bound`, where the backward's structure is known from the op's family: the backward of a matmul is two
  matmuls, of an elementwise op elementwise, of softmax and the norms row reductions (and the gradients of
  per-column parameters, column reductions). The bound has the forward's form,
      |g - g_ref| <= c (u_g |g_ref| + s(n) u_acc S + k_f u_acc |g_ref| + eta),
  with n the length the gradient sums over (the output's dims the input lacks; the row for a row-wise
  family's main input) and S the reference's gradient on |inputs| and |upstream gradient| (exact |G||B|^T
  for a matmul, the sum of |terms| of a column reduction), at least |g_ref|, and for a row-wise family's
  main input at least the row's largest |g_ref| (there, as in the forward's norm bound, s(n) + 2 + k_f roundings
  at that scale). Like the forward's, it is widened to c x the error model of the reference's own backward
  measured in float64 on moved inputs where a case needs it (oracle/precision.gradient_measurements).
- `baseline_relative`, where it is not (reductions such as a loss, attention, scan, custom, no family): the
  error may be at most k = c x 2 times that measured error model of the reference's own backward, plus the
  rounding to the gradient's dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from math import prod, sqrt

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.config.model import Family, OpSpec, Validation
from gpuemu_ci.oracle import (
    attention_grads,
    bounds,
    constant_rows,
    gathers,
    gradient_accumulators,
    norm_rows,
    overflow,
    precision,
    row_statistics,
    ties,
)
from gpuemu_ci.oracle.argmax import axis_of
from gpuemu_ci.oracle.compare import compare
from gpuemu_ci.oracle.gradient_terms import GRADIENT_TERMS
from gpuemu_ci.oracle.invariants import bias_z, lean_ulp
from gpuemu_ci.oracle.model import Comparator, ErrorStats, Finding
from gpuemu_ci.oracle.nonfinite_rules import nonfinite_rules
from gpuemu_ci.oracle.terms import GradientTermCase, add_terms, words_of
from gpuemu_ci.results.model import FailureKind

STRUCTURED = frozenset({Family.MATMUL, Family.ELEMENTWISE, Family.SOFTMAX, Family.NORM})
ROW_WISE = frozenset({Family.SOFTMAX, Family.NORM})


def rule_for(op: OpSpec) -> Comparator:
    """Which rule judges the op's gradients."""
    return Comparator.BOUND if op.error_model.family in STRUCTURED else Comparator.BASELINE_RELATIVE


@dataclass(frozen=True)
class GradientCase:
    """What judging one case's gradients needs besides the op's config."""

    dtype: str  # the case dtype
    dims: Mapping[str, int]
    names: tuple[str, ...]  # the inputs whose gradients are checked, in order
    input_dtypes: Mapping[str, str]
    reference: tuple[np.ndarray, ...]  # float64 gradients
    reference_abs: tuple[np.ndarray, ...] | None  # the reference's gradients on |inputs| and |upstream|
    low: Callable[
        [], tuple[np.ndarray, ...] | None
    ]  # the reference's measured gradients (gradient_measurements)
    bias_test: bool = False
    correlated: bool = False
    # The forward's inputs (in their dtypes), the reference's outputs and the upstream gradients: what a
    # structured bound of the backward needs (oracle/attention_grads.py; ties of a selection, oracle/ties.py).
    inputs: Mapping[str, np.ndarray] = field(default_factory=dict)
    forward: tuple[np.ndarray, ...] = ()
    upstream: tuple[np.ndarray | None, ...] = ()
    kwargs: Mapping[str, object] = field(default_factory=dict)
    counted: tuple[np.ndarray, ...] | None = None  # terms routed to each element (oracle/gathers.py)
    saved: tuple[np.ndarray, ...] | None = None  # the op's own forward outputs (oracle/row_statistics.py)
    probe: constant_rows.Probe | None = None  # the reference's gradients elsewhere (oracle/constant_rows.py)
    # The reference's gradients in the working precision alone: where they overflow too, for what a non-finite
    # gradient means (oracle/overflow.py); never an allowance.
    working: Callable[[], tuple[np.ndarray, ...] | None] | None = None


@dataclass(frozen=True)
class GradientVerdict:
    """What judging a case's gradients found, and the figures of each gradient judged."""

    findings: tuple[Finding, ...]
    stats: tuple[tuple[str, ErrorStats], ...]  # (input name, stats) per judged gradient


def judge_gradients(
    op: OpSpec,
    case: GradientCase,
    grads: tuple[np.ndarray, ...],
    rerun: tuple[np.ndarray, ...] | None,
    validation: Validation,
) -> GradientVerdict:
    """Judge every gradient of a `backward = true` case (module docstring: the `bound` or `baseline_relative`
    rule, the list's terms, the bias test) and the determinism of a re-run."""
    findings: list[Finding] = []
    stats: list[tuple[str, ErrorStats]] = []
    low_cache: list[tuple[np.ndarray, ...] | None] = []
    attention_cache: list[attention_grads.AttentionGradientBound | None] = []

    def attention() -> attention_grads.AttentionGradientBound | None:
        if not attention_cache:
            attention_cache.append(_attention_bound(op, case))
        return attention_cache[0]

    def low(position: int) -> np.ndarray | None:
        if not low_cache:
            low_cache.append(case.low())
        found = low_cache[0]
        return None if found is None or len(found) <= position else found[position]

    for position, (name, g, r) in enumerate(zip(case.names, grads, case.reference, strict=True)):
        label = f"grad of {name}: "
        g = np.asarray(g)
        expected_dtype = case.input_dtypes[name]
        if tuple(g.shape) != tuple(r.shape):
            findings.append(
                Finding(FailureKind.SHAPE, f"{label}shape {tuple(g.shape)} != the input's {tuple(r.shape)}")
            )
            continue
        if dtypes.name_of(g.dtype) != expected_dtype:
            findings.append(
                Finding(
                    FailureKind.DTYPE,
                    f"{label}dtype {dtypes.name_of(g.dtype)} != the input's {expected_dtype}",
                )
            )
            continue
        r = np.asarray(r, dtype=np.float64)
        rule = rule_for(op)
        abs_grad = case.reference_abs[position] if case.reference_abs is not None else None
        saved = row_statistics.NONE
        declared = gradient_accumulators.term(
            op, case.dims, name, r, abs_grad, expected_dtype, case.correlated
        )
        if rule is Comparator.BOUND:
            allowed = structure_bound(op, case, name, r, abs_grad, expected_dtype)
            allowed = allowed if declared is None else allowed + declared
            one, found = compare(g, r, allowed, rule, expected_dtype)
            if any(f.kind is FailureKind.MISMATCH for f in found):
                measured = low(position)
                if measured is not None:
                    allowed = np.maximum(allowed, _empirical(op, case.dtype, r, measured, abs_grad))
                    one, found = compare(g, r, allowed, rule, expected_dtype)
        else:
            saved = row_statistics.saved_statistics(
                op, case.dtype, _forward(case), name, r, expected_dtype, case.correlated
            )
            allowed = _rounding_floor(op, case.dtype, r, expected_dtype) + np.maximum(
                _sum_floor(op, case, name, abs_grad),
                gathers.scatter_floor(
                    op,
                    case.dtype,
                    gathers.scattered_terms(
                        op,
                        case.dims,
                        name,
                        summed_length(op, case, name),
                        case.counted[position] if case.counted is not None else None,
                    ),
                    abs_grad,
                    expected_dtype,
                ),
            )
            allowed = allowed + op.error_model.bound_c * saved.term
            allowed = allowed if declared is None else allowed + declared
            measured = low(position)
            if measured is not None:
                allowed = allowed + _empirical(op, case.dtype, r, measured, abs_grad)
            if op.error_model.family is Family.ATTENTION:
                model = attention()
                structured = model.allowances.get(name) if model is not None else None
                if structured is not None and structured.shape == r.shape:
                    floor = _rounding_floor(op, case.dtype, r, expected_dtype)
                    allowed = np.maximum(allowed, floor + structured)
            judged = _routed_among_ties(op, case, name, g, r, allowed)
            if saved.zero_excused is not None:  # a subgradient 0 where the saved output underflowed to 0
                judged = np.where(saved.zero_excused & (judged == 0), r, judged)
            one, found = compare(judged, r, allowed, rule, expected_dtype)
        said = _measured_words(op, case.dtype) if low_cache and low_cache[0] is not None else ""
        said += saved.words
        mismatched = any(f.kind is FailureKind.MISMATCH for f in found)
        said += words_of(GRADIENT_TERMS, _term_case(op, case, name, r, expected_dtype, mismatched=mismatched))
        model = attention_cache[0] if attention_cache else None
        if model is not None and name in model.allowances:
            said += model.words()
        elif attention_cache:
            said += attention_grads.UNIDENTIFIED
        if case.working is not None and any(f.kind is FailureKind.NONFINITE for f in found):
            runs = case.working()
            why = overflow.note(
                g, r, runs[position] if runs is not None and len(runs) > position else None,
                precision.working_precision(op, case.dtype) or "float32", case.dtype,
            )  # fmt: skip
            found = [
                Finding(f.kind, f.message + why) if f.kind is FailureKind.NONFINITE else f for f in found
            ]
        found += nonfinite_rules(g, r, validation)
        findings.extend(
            Finding(f.kind, label + f.message + (said if f.kind is FailureKind.MISMATCH else ""))
            for f in found
        )
        if case.bias_test:
            model = attention() if op.error_model.family is Family.ATTENTION else None
            bias = _bias_finding(
                op, case, name, g, r, expected_dtype, validation, model, partial(low, position)
            )
            findings.extend(Finding(f.kind, label + f.message) for f in bias)
        stats.append((name, one))
    if rerun is not None:
        for name, first, second in zip(case.names, grads, rerun, strict=False):
            a, b = np.asarray(first), np.asarray(second)
            if a.shape != b.shape or a.tobytes() != b.tobytes():
                differ = int((a != b).sum()) if a.shape == b.shape else a.size
                findings.append(
                    Finding(
                        FailureKind.NONDETERMINISTIC,
                        f"grad of {name}: re-running forward and backward on identical inputs changed {differ} "
                        "elements (the op is declared deterministic)",
                    )
                )
                break
    return GradientVerdict(tuple(findings), tuple(stats))


def _attention_bound(op: OpSpec, case: GradientCase) -> attention_grads.AttentionGradientBound | None:
    """The attention family's backward model (oracle/attention_grads.py); None for other families, and where
    the structure cannot be identified (hook-built inputs without declared dims, masks it cannot reproduce):
    then the baseline-relative rule alone judges."""
    if op.error_model.family is not Family.ATTENTION or not case.forward or not case.upstream:
        return None
    upstream = case.upstream[0]
    if upstream is None:
        return None
    floats = {n: a for n, a in case.inputs.items() if dtypes.is_float_dtype(np.asarray(a).dtype)}
    return attention_grads.gradient_bound(
        op, case.dtype, floats, case.forward[0], upstream, case.kwargs, case.correlated
    )


def _forward(case: GradientCase) -> row_statistics.Forward | None:
    """What the op's backward computed from, for oracle/row_statistics.py; None where the case carries none."""
    if not case.inputs and not case.forward:
        return None
    return row_statistics.Forward(
        case.inputs, case.forward, case.saved, case.upstream, case.kwargs, case.probe
    )


def summed_length(op: OpSpec, case: GradientCase, name: str) -> int:
    """n: how many terms each element of the gradient of `name` sums: the output's dims the input lacks (a
    matmul's N for grad A, M for grad B; the rows for a norm's weight), or the row for a row-wise family's
    input shaped like the output."""
    spec = next((s for s in op.shapes.inputs if s.name == name), None)
    if spec is None:
        return 1
    input_dims = {d for d in spec.dims if isinstance(d, str)}
    output_dims = op.shapes.output_dims
    if output_dims is None:
        output_dims = op.shapes.inputs[0].dims if op.shapes.inputs else ()
    missing = [d for d in output_dims if isinstance(d, str) and d not in input_dims]
    n = prod(case.dims.get(d, 1) for d in missing) if missing else 1
    if op.error_model.family in ROW_WISE and spec.dims and spec.dims[-1] == (output_dims or (None,))[-1]:
        last = spec.dims[-1]
        n = max(n, case.dims.get(last, 1) if isinstance(last, str) else int(last))
    return max(1, int(n))


def structure_bound(
    op: OpSpec,
    case: GradientCase,
    name: str,
    r: np.ndarray,
    abs_grad: np.ndarray | None,
    grad_dtype: str,
) -> np.ndarray:
    """The family bound of one gradient (module docstring)."""
    magnitude = np.abs(np.where(np.isfinite(r), r, 0.0))
    scale = magnitude
    if abs_grad is not None and abs_grad.shape == r.shape:
        scale = np.maximum(scale, np.abs(np.where(np.isfinite(abs_grad), abs_grad, 0.0)))
    n = summed_length(op, case, name)
    if op.error_model.family in ROW_WISE and r.ndim and r.size:
        scale = np.maximum(scale, magnitude.max(axis=-1, keepdims=True))
    terms = row_statistics.softmax_terms(op, _forward(case), name, r)
    if terms is not None:
        scale = np.maximum(scale, terms)
    norm = row_statistics.layer_norm_terms(op, case.dtype, _forward(case), name, r)
    if norm is not None:
        scale = np.maximum(scale, norm.scale)
    rstd = norm_rows.terms(op, case.dtype, _forward(case), name, r)  # an RMS norm's terms, the saved rstd
    if rstd is not None:
        scale = np.maximum(scale, rstd.scale)
    if op.error_model.family is Family.ELEMENTWISE:
        n = 1
    u_g = dtypes.info(grad_dtype).unit_roundoff
    u_acc = bounds.accumulator_roundoff(op, case.dtype)
    g = float(n) if case.correlated else sqrt(n)
    k_f = op.error_model.transcendental_ulps
    term = g * u_acc * scale + k_f * u_acc * magnitude
    if op.error_model.family in ROW_WISE:
        # As the forward's norm bound: the row statistic (an rsqrt, an exp) and its subtraction scale every term
        # of the row, so their roundings count at the row's scale, not at |g_ref| (which cancels toward 0).
        term = (g + 2.0 + k_f) * u_acc * scale
    elif op.error_model.family is Family.ELEMENTWISE:
        term = (1.0 + k_f) * u_acc * scale  # as the forward's elementwise bound, at the terms' scale
    eta = row_statistics.gradient_floor(op, case.dtype, grad_dtype)
    eta += n * dtypes.info("float32").min_subnormal / 2.0
    saved_mean = norm.saved_mean if norm is not None else 0.0
    saved_mean = saved_mean + (rstd.saved if rstd is not None else 0.0)
    # ... then the list's terms: an elementwise op's 16-bit intermediates (kl_div's log(target) rounded to
    # float16 before `- logp + 1`, its `g * target` below float16's normal range), a rotation's gradient, the
    # saved softmax output, flushed products (bf16: DAZ/FTZ).
    products = _upstream_times_input(case, name, r) if op.error_model.family is Family.ELEMENTWISE else None
    term_case = _term_case(op, case, name, r, grad_dtype, n=n, u_acc=u_acc, scale=scale, products=products)
    term = add_terms(GRADIENT_TERMS, term_case, term)
    return op.error_model.bound_c * (u_g * magnitude + term + eta + saved_mean)


def _term_case(
    op: OpSpec,
    case: GradientCase,
    name: str,
    r: np.ndarray,
    grad_dtype: str,
    *,
    n: int = 1,
    u_acc: float = 0.0,
    scale: np.ndarray | None = None,
    products: np.ndarray | None = None,
    mismatched: bool = False,
) -> GradientTermCase:
    """One gradient as the list's terms see it: with the structure bound's n, u_acc, scale and products for its
    allowance, or whether it mismatched for its words."""
    return GradientTermCase(
        op,
        case.dtype,
        name,
        r,
        grad_dtype,
        rule_for(op),
        dims=case.dims,
        kwargs=case.kwargs,
        inputs=case.inputs,
        upstream=case.upstream,
        forward=_forward(case),
        correlated=case.correlated,
        n=n,
        u_acc=u_acc,
        scale=scale,
        products=products,
        mismatched=mismatched,
    )


def _upstream_times_input(case: GradientCase, name: str, r: np.ndarray) -> np.ndarray | None:
    """|g x| in the gradient's shape, g the first output's upstream gradient and x the input the gradient is
    for (an elementwise op's: both broadcast to it); None where they do not."""
    x = case.inputs.get(name)
    g = case.upstream[0] if case.upstream else None
    if x is None or g is None:
        return None
    try:
        product = np.abs(np.asarray(g, dtype=np.float64) * np.asarray(x, dtype=np.float64))
        return np.broadcast_to(product, r.shape)
    except ValueError:
        return None


def _measured_words(op: OpSpec, case_dtype: str) -> str:
    """What widened a gradient's allowance, for its failure message."""
    runs = [
        f"on inputs moved by one {m.moved_in} rounding"
        if m.moved_in
        else f"with values below {m.flushed_below}'s smallest normal as 0"
        if m.flushed_below
        else f"in {m.dtype}"
        for m in precision.gradient_measurements(op, case_dtype)
    ]
    scaled = " (scaled by u64/u32)" if precision.error_scale(op, case_dtype) != 1.0 else ""
    return (
        f"; the allowance includes {op.error_model.bound_c:g} × {precision.ROUNDINGS:g} × the reference's own "
        f"backward error{scaled}, measured {', '.join(runs)}, at the scale of the row's largest |g_ref| and of "
        "the terms it sums"
    )


# How close, in ulps, a gradient's lean must come to the lean of the reference's own 16-bit backward to be
# explained by it: PyTorch's 16-bit var backward, whose lean comes from its rounded 2/(n-1), stays within 0.05.
LEAN_MATCH_ULP = 0.1


def _bias_finding(
    op: OpSpec,
    case: GradientCase,
    name: str,
    g: np.ndarray,
    r: np.ndarray,
    grad_dtype: str,
    validation: Validation,
    model: attention_grads.AttentionGradientBound | None,
    measured: Callable[[], np.ndarray | None],
) -> list[Finding]:
    """The rounding-bias test of one gradient (oracle/invariants.bias_z) over its rows of independent samples
    (attention's (batch, head) rows, a norm's groups), unless an evaluation a correct backward may follow leans
    the same way (_bias_explained)."""

    def as_samples(values: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        if model is not None:
            return model.bias_samples(name, values, r)
        return bounds.statistic_rows(op, case.kwargs, values, r)

    samples = as_samples(g)
    z = bias_z(*samples, grad_dtype) if samples is not None else None
    if z is None or abs(z) <= validation.bias_z_threshold:
        return []
    sources = _lean_sources(op, case, name, r, measured())
    if _bias_explained(z, sources, as_samples, g, r, grad_dtype, validation.bias_z_threshold):
        return []
    way = "toward zero" if z < 0 else "away from zero"
    return [
        Finding(
            FailureKind.BIAS,
            f"rounding bias z = {z:.1f} (|z| > {validation.bias_z_threshold:g}): the gradient is rounded {way} "
            "systematically",
        )
    ]


def _lean_sources(
    op: OpSpec, case: GradientCase, name: str, r: np.ndarray, measured: np.ndarray | None
) -> list[np.ndarray]:
    """Evaluations whose lean a correct gradient may share: the reference's own measured backward; a norm's
    gradient evaluated exactly from its statistics rounded to the case's dtype (oracle/norm_rows.py: PyTorch's
    CPU norms save their mean and rstd so, and one rounded rstd moves a whole group of a bfloat16 group norm's
    gradient by up to 0.43 ulp, the same way); a variance's or std's gradient as autograd's formula evaluates it
    in that dtype (row_statistics.dispersion_in_dtype)."""
    sources = [] if measured is None else [np.asarray(measured, dtype=np.float64)]
    forward = _forward(case)
    norm = norm_rows.terms(op, case.dtype, forward, name, r)
    if norm is not None:
        sources.append(norm.from_saved)
    dispersion = row_statistics.dispersion_in_dtype(op, case.dtype, forward, name, r)
    if dispersion is not None:
        sources.append(dispersion)
    return sources


def _bias_explained(
    z: float,
    sources: list[np.ndarray],
    as_samples: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray] | None],
    g: np.ndarray,
    r: np.ndarray,
    grad_dtype: str,
    threshold: float,
) -> bool:
    """Whether an evaluation a correct backward may follow (_lean_sources), rounded to the gradient's 16-bit
    dtype, shows the same bias: a backward computed from outputs saved in 16 bits (softmax's, a norm's
    statistics) or multiplied by a constant rounded to 16 bits (var's 2/(n-1)) leans one way because the
    mathematics does in that dtype, not because a store truncates. Explained where the two z (over the same
    samples) agree within the threshold, or where the two leans (each element clipped to one ulp) agree within
    LEAN_MATCH_ULP: a truncating store on top of such a lean adds half an ulp, and one that truncates a fifth of
    the values, a tenth."""
    lean = lean_ulp(g, r, grad_dtype)
    for source in sources:
        low = source.astype(dtypes.info(grad_dtype).numpy)
        samples = as_samples(low)
        z_reference = bias_z(*samples, grad_dtype) if samples is not None else None
        if z_reference is not None and abs(z - z_reference) <= threshold:
            return True
        lean_reference = lean_ulp(low, r, grad_dtype)
        if lean is not None and lean_reference is not None and abs(lean - lean_reference) <= LEAN_MATCH_ULP:
            return True
    return False


def _sum_floor(op: OpSpec, case: GradientCase, name: str, abs_grad: np.ndarray | None) -> np.ndarray | float:
    """c sqrt(n) u_acc S, S the reference's gradient on |inputs| and |upstream| (the sum of the |terms| each
    element adds up, exactly so for an embedding's weight or a pooling's input), n the length summed: the
    rounding of a sum, which a working-precision evaluation that happens to add in an exact order misses."""
    if abs_grad is None:
        return 0.0
    scale = np.abs(np.where(np.isfinite(abs_grad), abs_grad, 0.0))
    u_acc = bounds.accumulator_roundoff(op, case.dtype)
    return op.error_model.bound_c * sqrt(summed_length(op, case, name)) * u_acc * scale


def _routed_among_ties(
    op: OpSpec, case: GradientCase, name: str, g: np.ndarray, r: np.ndarray, allowed: np.ndarray
) -> np.ndarray:
    """The gradient as judged: for the `exact` family (a selection), the reference's value at elements whose
    group of tied inputs received the right total (oracle/ties.py; within a pooling's `kernel_size`), the op's
    own value everywhere else."""
    x = case.inputs.get(name)
    if op.error_model.family is not Family.EXACT or x is None:
        return g
    window = case.kwargs.get("kernel_size")  # a pooling's window: how far apart two tied choices may lie
    reach = window if isinstance(window, int) and not isinstance(window, bool) else None
    excused = ties.excused_at_ties(x, g, r, allowed, axis_of(case.kwargs), reach)
    return np.where(excused, r, np.asarray(g, dtype=np.float64)) if excused.any() else g


def _rounding_floor(op: OpSpec, case_dtype: str, r: np.ndarray, grad_dtype: str) -> np.ndarray:
    """What the baseline-relative rule allows besides k x the reference's own error: rounding the gradient to
    its dtype, and the accumulator's roundings at the scale of the gradient's terms."""
    magnitude = np.abs(np.where(np.isfinite(r), r, 0.0))
    u_g = dtypes.info(grad_dtype).unit_roundoff
    u_acc = bounds.accumulator_roundoff(op, case_dtype)
    floor = row_statistics.gradient_floor(op, case_dtype, grad_dtype)
    return op.error_model.bound_c * (u_g * magnitude + u_acc * magnitude + floor)


def _empirical(
    op: OpSpec, case_dtype: str, r: np.ndarray, low: np.ndarray, abs_grad: np.ndarray | None = None
) -> np.ndarray:
    """c x ROUNDINGS x the error model of the reference's gradient measured on moved inputs (and flushed ones:
    oracle/precision.gradient_measurements), scaled to float64 for float64
    cases."""
    # Each element of a gradient sums terms shared along its row (a softmax row, the keys of a query, a
    # column of a weight): its error follows the row's largest |g_ref|, not its own |g_ref|, which cancels,
    # and the size of the terms it sums, which the reference's gradient on |inputs| and |upstream| measures
    # (for a query's gradient, the keys' magnitude even where their offset cancels out of the answer).
    magnitude = np.abs(np.where(np.isfinite(r), r, 0.0))
    if magnitude.ndim and magnitude.size:
        magnitude = np.broadcast_to(magnitude.max(axis=-1, keepdims=True), r.shape)
    if abs_grad is not None and abs_grad.shape == r.shape:
        magnitude = np.maximum(magnitude, np.abs(np.where(np.isfinite(abs_grad), abs_grad, 0.0)))
    found = precision.empirical_term(r, np.asarray(low, dtype=np.float64), magnitude, relative=False)
    if found is None:
        return np.zeros_like(r)
    term, _ = found
    return op.error_model.bound_c * precision.ROUNDINGS * precision.error_scale(op, case_dtype) * term
