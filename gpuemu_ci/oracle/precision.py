"""The working precision of a case, and the error model measured from the reference.

A correct kernel errs where the problem is ill-conditioned by far more than any closed-form family bound says
(a loss that is the difference of a log-sum-exp and a logit of 1e10, the square root of a cancelling variance).
The reference, run in float64 on inputs moved by one rounding of the working precision (oracle/conditioning.py),
measures that error E, however the reference is written.

One element's E is luck (a move may happen to cancel where the kernel's rounding does not), so E becomes an
error *model* before it is used: for each candidate scale s, the reference's magnitude |r|, the magnitude of the
inputs that feed each output element, and a constant, the worst ratio E/s over the case times s. Each model
covers every error the measurement saw; the allowance takes, per element, the smallest of them, and the judge
allows c times the larger of it and the family bound (oracle/judge.py).

The reference's run on inputs cast to the working precision is kept for one thing only: to say, where the op's
output is non-finite and the exact answer is not, whether the formula overflows that precision too
(oracle/overflow.py). It is never part of an allowance: it measures something only where the reference computes
in the dtype it is given, and a verdict must not depend on how the reference is written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.config.model import Family, OpSpec
from gpuemu_ci.oracle.model import CaseVerdict
from gpuemu_ci.results.model import FailureKind

FAMILIES = frozenset(Family) - {Family.EXACT}
# A kernel rounds an internal quantity (an angle, a mean) in its own order, often a few more times than the
# reference's float32 evaluation does: the model is taken twice before the bound's c (the FlashAttention tests
# allow 2-3 times a same-precision implementation's error for the same reason).
ROUNDINGS = 2.0


def working_precision(op: OpSpec, case_dtype: str) -> str | None:
    """The dtype the reference is measured in: the op's declared accumulator, else float32 for float32, 16-bit
    and float64 cases (a float64 case's measurement is scaled down to float64, `error_scale`); None when there is
    nothing below float64 to measure (a float64 accumulator, integer cases, ops without a family)."""
    if op.error_model.family not in FAMILIES or not op.error_model.precision_reference:
        return None
    if op.error_model.accumulator:
        chosen = op.error_model.accumulator
    elif case_dtype in ("float32", "float16", "bfloat16", "float64"):
        chosen = "float32"
    else:
        return None
    return chosen if dtypes.info(chosen).is_float and chosen != "float64" else None


def error_scale(op: OpSpec, case_dtype: str) -> float:
    """What the measured error is multiplied by to model the kernel's: 1, except for a float64 case without a
    declared accumulator, which computes in float64 but is measured in float32. To first order a rounding error
    is a sum of terms each proportional to the unit roundoff, so the float32 error times u64/u32 (2^-29) models
    the same mathematics in float64: cancellation, conditioning and the length of sums carry over unchanged."""
    measured = working_precision(op, case_dtype)
    if measured is None or case_dtype != "float64" or op.error_model.accumulator:
        return 1.0
    return dtypes.info("float64").unit_roundoff / dtypes.info(measured).unit_roundoff


@dataclass(frozen=True)
class Measurement:
    """One evaluation of the reference's backward that the gradients' error model is built from."""

    dtype: str  # the dtype it computes in
    moved_in: str = (
        ""  # inputs and upstream gradients moved by one rounding of this dtype first (conditioning.py)
    )
    flushed_below: str = (
        ""  # float inputs and upstream gradients below this dtype's smallest normal count as 0
    )


def gradient_measurements(op: OpSpec, case_dtype: str) -> tuple[Measurement, ...]:
    """How the reference's backward is measured, always in float64 (so however the reference is written: in
    the dtype of its inputs or upcast to float64); the model takes, per element, the farthest of them:

    - on inputs and upstream gradients moved by one rounding of the working precision (oracle/conditioning.py,
      a softmax's input relative to x - max): what the problem's conditioning costs;
    - for 16-bit cases, moved by one rounding of the case's dtype as well: a backward computes from the
      forward's outputs and statistics as saved in the tensors' 16-bit dtype (softmax's `y (g - sum g y)`, a
      variance's `x - mean`), and their rounding, amplified by what the backward does with them, is rounding a
      correct 16-bit backward makes;
    - with the values below the working precision's smallest normal counted as 0: a GPU computing with
      flush-to-zero reads a subnormal upstream gradient as 0, and a backward that scales it first (`2 g /
      (n - 1)`) loses it below the normal range wherever it computes.

    The reference's own backward evaluated in the working or the 16-bit dtype is not among them: it measures
    something only where the reference computes in the dtype it is given, so the verdict would depend on how
    the reference is written (issue #44)."""
    working = working_precision(op, case_dtype)
    if working is None:
        return ()
    found = [Measurement("float64", moved_in=working)]
    if case_dtype in ("float16", "bfloat16"):
        found.append(Measurement("float64", moved_in=case_dtype))
    found.append(Measurement("float64", flushed_below=working))
    return tuple(found)


def farthest(exact: np.ndarray, measured: list[np.ndarray]) -> np.ndarray:
    """Per element, the measured value farthest from the exact one (non-finite measurements are skipped)."""
    r = np.asarray(exact, dtype=np.float64)
    best = r.copy()
    best_error = np.zeros(r.shape)
    for run in measured:
        w = np.asarray(run, dtype=np.float64)
        if w.shape != r.shape:
            continue
        error = np.abs(w - r)
        wider = np.isfinite(error) & (error > best_error)
        best = np.where(wider, w, best)
        best_error = np.where(wider, error, best_error)
    return best


def worth_measuring(op: OpSpec, case_dtype: str, verdict: CaseVerdict, kind: FailureKind) -> bool:
    """Whether a case needs a measurement: it fails with `kind` (MISMATCH: the family bound, so the moved-input
    model may widen it; NONFINITE: non-finite outputs where the reference is finite, so the working-precision
    run says whether the formula overflows there too, oracle/overflow.py), and there is a working precision
    below float64 to measure in. A case within the family bound passes either way."""
    return (
        not verdict.passed
        and any(f.kind is kind for f in verdict.findings)
        and working_precision(op, case_dtype) is not None
    )


def working_precision_inputs(
    op: OpSpec, case_dtype: str, logical: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Copies of the inputs whose float arrays are cast to the working precision (exact for float32 and 16-bit
    inputs): the reference called on them computes as a correct kernel in that precision would."""
    target = dtypes.info(working_precision(op, case_dtype) or "float32").numpy
    return {
        name: np.ascontiguousarray(a, dtype=target)
        if dtypes.is_float_dtype(a.dtype)
        else np.ascontiguousarray(a)
        for name, a in logical.items()
    }


def input_magnitude(
    op: OpSpec,
    inputs: Mapping[str, np.ndarray],
    out_shape: tuple[int, ...],
    reduce: Callable[..., np.ndarray] = np.max,
) -> np.ndarray | None:
    """Per output element, the largest |x| among the input elements that can feed it: inputs of the output's
    shape (or broadcasting to it) elementwise, inputs aligned with the output by their dim names (reduced with
    `reduce`, the max by default, over the dims the output does not have), any other input by its largest
    magnitude. None without float inputs."""
    specs = {spec.name: spec for spec in op.shapes.inputs}
    output_dims = op.shapes.output_dims
    result: np.ndarray | None = None
    for name, x in inputs.items():
        if not x.size:
            continue
        magnitude = np.abs(np.where(np.isfinite(x), x, 0.0))
        spec = specs.get(name)
        aligned = _aligned(magnitude, spec.dims if spec else None, output_dims, out_shape, reduce)
        if aligned is None:
            aligned = np.full((1,) * len(out_shape), float(reduce(magnitude)))
        result = aligned if result is None else np.maximum(result, aligned)
    return None if result is None else np.broadcast_to(result, out_shape)


def _aligned(
    magnitude: np.ndarray,
    input_dims: tuple[str | int, ...] | None,
    output_dims: tuple[str | int, ...] | None,
    out_shape: tuple[int, ...],
    reduce: Callable[..., np.ndarray],
) -> np.ndarray | None:
    """`magnitude` in the output's layout: by dim names when both sides have them, else by shape."""
    if input_dims is not None and output_dims is not None and len(output_dims) == len(out_shape):
        return _by_names(magnitude, input_dims, output_dims, out_shape, reduce)
    try:
        if np.broadcast_shapes(magnitude.shape, out_shape) == out_shape:
            return magnitude
    except ValueError:
        pass
    return None


def _by_names(
    magnitude: np.ndarray,
    input_dims: tuple[str | int, ...],
    output_dims: tuple[str | int, ...],
    out_shape: tuple[int, ...],
    reduce: Callable[..., np.ndarray],
) -> np.ndarray | None:
    names = [d if isinstance(d, str) else None for d in input_dims]
    if len(names) != magnitude.ndim or len({n for n in names if n}) != len([n for n in names if n]):
        return None
    wanted = [d for d in output_dims if isinstance(d, str)]
    reduce_axes = tuple(i for i, n in enumerate(names) if n not in wanted)
    kept = reduce(magnitude, axis=reduce_axes) if reduce_axes else magnitude
    kept_names = [n for n in names if n in wanted]
    # The kept axes in the output's order, then a size-1 axis for each output dim this input lacks.
    kept = np.transpose(kept, [kept_names.index(d) for d in wanted if d in kept_names])
    shape = [
        out if isinstance(d, str) and d in kept_names else 1
        for d, out in zip(output_dims, out_shape, strict=True)
    ]
    try:
        return np.reshape(kept, shape)
    except ValueError:
        return None


def empirical_term(
    reference: np.ndarray,
    low: np.ndarray,
    magnitude: np.ndarray | None,
    relative: bool = True,
    absolute_below: float = 0.0,
) -> tuple[np.ndarray, str] | None:
    """The error model a measured change of the reference supports (before the factor c), and which scale it
    uses; None when it measured no error. `relative = False` leaves out the |reference| model (gradients, whose
    elements sum terms far larger than themselves: their scale is `magnitude`).

    The fit leaves out the elements whose nonzero |reference| is below `absolute_below` (the working precision's
    smallest normal), and the model is then evaluated there like anywhere: below the normal range rounding errs
    in absolute terms, by half a subnormal, which the family bound's underflow term allows, and a subnormal
    output moved by up to 100% of itself would set the relative model of every element to about 1."""
    r = np.asarray(reference, dtype=np.float64)
    w = np.asarray(low, dtype=np.float64)
    if w.shape != r.shape:
        return None
    usable = np.isfinite(r) & np.isfinite(w)
    error = np.where(usable, np.abs(w - np.where(usable, r, 0.0)), 0.0)
    tiny = usable & (np.abs(r) > 0) & (np.abs(r) < absolute_below)
    error = np.where(tiny, 0.0, error)
    if not np.any(error > 0):
        return None
    models = [("|reference|", np.abs(np.where(usable, r, 0.0)))] if relative else []
    if magnitude is not None:
        models.append(("input magnitude", np.asarray(magnitude, dtype=np.float64)))
    models.append(("constant", np.ones_like(r)))
    erring = error > 0
    best: np.ndarray | None = None
    used = []
    for label, scale in models:
        scale = np.broadcast_to(scale, r.shape)
        if np.any(erring & (scale <= 0)):
            continue  # this scale cannot explain an error where it is 0
        term = float(np.max(error[erring] / scale[erring])) * scale
        best = term if best is None else np.minimum(best, term)
        used.append(label)
    if best is None:
        return None
    return best, " / ".join(used)
