"""Intermediates an op declares it computes itself from exact values (`[ops.intermediates]`).

A rotary embedding computes its angles `position * inv_freq` from integer positions; a mean multiplies by `1/n`
from an integer count. The reference computes the same quantities from the same exact values, in float64 when
it is given float64 inputs (every run the bound uses is), so nothing it returns shows what rounding them costs:
no input moves them (oracle/conditioning.py moves inputs). A declaration says what the op does, and the bound
counts it (for every family, forward and gradients):

- `effect = "rotation"`: an angle of at most `max` radians (an expression over the case's dims and kwargs),
  computed in `dtype` (default: the op's working precision, float32 for 16-bit and float32 cases), errs by
  ROTATION_ROUNDINGS roundings of it: the frequency's power (one ulp, two roundings' worth), its reciprocal and
  the product with the position. A rotation moves each value of a pair by the angle's error times the pair's
  magnitude, which the rotation keeps: at most the largest |output| of the row (the last axis, where the pairs
  are). So the term is `ROTATION_ROUNDINGS * u * max * max_row |r|`.
- `effect = "scale"`: a factor computed in `dtype` moves the output by SCALE_ROUNDINGS of its relative
  roundings (its own evaluation, a division or a square root, and the product): `SCALE_ROUNDINGS * u * |r|`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.config.expressions import LaunchError, evaluate
from gpuemu_ci.config.model import Intermediate, IntermediateEffect, OpSpec
from gpuemu_ci.oracle.terms import Allowance, ForwardCase, GradientTermCase

ROTATION_ROUNDINGS = 4.0
SCALE_ROUNDINGS = 2.0


def roundoff(declared: Intermediate, u_acc: float) -> float:
    """The unit roundoff of the precision the op computes the intermediate in (its declared dtype, else the
    op's working precision, whose unit roundoff is `u_acc`: bounds.accumulator_roundoff)."""
    return dtypes.info(declared.dtype).unit_roundoff if declared.dtype is not None else u_acc


def largest(declared: Intermediate, dims: Mapping[str, int], kwargs: Mapping[str, object]) -> float:
    """The declared largest |value| in this case (0 without `max`, or where it cannot be evaluated)."""
    if declared.largest is None:
        return 0.0
    try:
        return abs(float(evaluate(declared.largest, {**kwargs, **dims})))
    except (LaunchError, ZeroDivisionError, OverflowError):
        return 0.0


def term(
    op: OpSpec,
    u_acc: float,
    dims: Mapping[str, int],
    kwargs: Mapping[str, object],
    reference: np.ndarray,
) -> np.ndarray | float:
    """What the declared intermediates allow per element of `reference` (an output, or a gradient: the
    gradient of a rotation is the rotation of the upstream gradient), before the bound's factor c."""
    if not op.error_model.intermediates:
        return 0.0
    r = np.abs(np.where(np.isfinite(reference), reference, 0.0))
    total: np.ndarray | float = 0.0
    for declared in op.error_model.intermediates:
        u = roundoff(declared, u_acc)
        if declared.effect is IntermediateEffect.ROTATION:
            row = r.max(axis=-1, keepdims=True) if r.ndim and r.size else r
            total = total + ROTATION_ROUNDINGS * u * largest(declared, dims, kwargs) * np.broadcast_to(
                row, r.shape
            )
        else:
            total = total + SCALE_ROUNDINGS * u * r
    return total


def note(op: OpSpec, u_acc: float, dims: Mapping[str, int], kwargs: Mapping[str, object]) -> str:
    """What the allowance includes, for a failure message."""
    said = []
    for declared in op.error_model.intermediates:
        u = roundoff(declared, u_acc)
        if declared.effect is IntermediateEffect.ROTATION:
            said.append(
                f"the declared angle `{declared.name}` (up to {largest(declared, dims, kwargs):.6g} rad, "
                f"{ROTATION_ROUNDINGS:g} roundings of u = {u:.3g}, times the row's largest |value|)"
            )
        else:
            said.append(
                f"the declared scale `{declared.name}` ({SCALE_ROUNDINGS:g} roundings of u = {u:.3g})"
            )
    return "; the bound counts " + " and ".join(said) if said else ""


SUGGESTION = "the error grows with the position along"
MIN_POSITIONS = 8
MIN_CORRELATION = 0.8
# Where an offset kwarg dwarfs the positions of the case, the growth cannot show: the error is taken for an
# angle's when it is at least a few roundings and at most this many per radian of position.
MAX_ROUNDINGS_PER_POSITION = 16.0


def suggestion(
    op: OpSpec,
    u_acc: float,
    kwargs: Mapping[str, object],
    first_dims: tuple[str | int, ...] | None,
    y: np.ndarray,
    r: np.ndarray,
) -> str:
    """A hint for a failing case whose error, relative to each row's largest |reference|, grows with the
    position along one axis of the output, as angles the op computes from positions (RoPE) make it: a rank
    correlation of at least MIN_CORRELATION over at least MIN_POSITIONS positions, or, with an integer `*offset*`
    kwarg, an error of a few roundings of the working precision (`u_acc`) per position, offset included. It
    names the declaration that would model them; `gpuemu-ci calibrate` repeats it. Empty where the op declares a
    rotation already, or where nothing grows."""
    if any(d.effect is IntermediateEffect.ROTATION for d in op.error_model.intermediates):
        return ""
    names = op.shapes.output_dims if op.shapes.output_dims is not None else first_dims
    y64, r64 = np.asarray(y, dtype=np.float64), np.asarray(r, dtype=np.float64)
    if names is None or len(names) != r64.ndim or y64.shape != r64.shape or r64.ndim < 2 or not r64.size:
        return ""
    usable = np.isfinite(y64) & np.isfinite(r64)
    row = np.abs(np.where(usable, r64, 0.0)).max(axis=-1, keepdims=True)
    ratio = np.where(usable & (row > 0), np.abs(y64 - r64) / np.where(row > 0, row, 1.0), 0.0)
    offset = next(
        (
            (k, int(v))
            for k, v in kwargs.items()
            if "offset" in k and isinstance(v, int) and not isinstance(v, bool)
        ),
        None,
    )
    best: tuple[float, str] | None = None
    for axis, name in enumerate(names[:-1]):
        if not isinstance(name, str) or r64.shape[axis] < MIN_POSITIONS:
            continue
        profile = np.moveaxis(ratio, axis, 0).reshape(r64.shape[axis], -1).max(axis=1)
        positions = np.arange(r64.shape[axis], dtype=np.float64)
        rho = _rank_correlation(positions, profile)
        if offset is not None and rho < MIN_CORRELATION:
            per_position = profile / (positions + abs(offset[1]) + 1.0)
            if profile.max() >= 8.0 * u_acc and per_position.max() <= MAX_ROUNDINGS_PER_POSITION * u_acc:
                rho = max(rho, MIN_CORRELATION)
        if rho >= MIN_CORRELATION and (best is None or rho > best[0]):
            best = (rho, name)
    if best is None:
        return ""
    _, name = best
    largest = f"{name} + {offset[0]}" if offset is not None else name
    return (
        f"; {SUGGESTION} {name}, as angles the op computes from positions make it: if it computes such angles, "
        f'declare them: `intermediates = {{ angle = {{ effect = "rotation", max = "{largest}" }} }}` '
        "(docs/how-it-decides.md: intermediates the op computes)"
    )


def _rank_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation of two equal-length vectors (0 when either is constant)."""
    ranks_a = np.argsort(np.argsort(a, kind="stable"), kind="stable").astype(np.float64)
    ranks_b = np.argsort(np.argsort(b, kind="stable"), kind="stable").astype(np.float64)
    ranks_a -= ranks_a.mean()
    ranks_b -= ranks_b.mean()
    scale = float(np.sqrt((ranks_a**2).sum() * (ranks_b**2).sum()))
    return float((ranks_a * ranks_b).sum() / scale) if scale > 0 and np.ptp(b) > 0 else 0.0


class DeclaredIntermediates:
    """The bound term of the quantities an op declares it computes in a precision of its own (module
    docstring), and, where a failure's error grows with a position, the declaration that would model it."""

    name = "declared_intermediates"
    models = "`[ops.intermediates]`: declared angles and scales the op computes in its own precision"

    def applies(self, case: ForwardCase) -> bool:
        """Every family (0 where nothing is declared)."""
        return True

    def allowance(self, case: ForwardCase) -> Allowance:
        """term()."""
        b = case.bound
        return term(case.op, case.u_acc, b.dims, b.kwargs, b.reference)

    def words(self, case: ForwardCase) -> str:
        """note(), then suggestion() on the output."""
        b = case.bound
        said = note(case.op, case.u_acc, b.dims, b.kwargs)
        if case.output is not None:
            said += suggestion(case.op, case.u_acc, b.kwargs, case.first_dims, case.output, b.reference)
        return said


class DeclaredGradientIntermediates:
    """The gradient's term of declared intermediates (a rotation's gradient rotates back by the same angle)."""

    name = "declared_intermediates"
    models = "`[ops.intermediates]` in the gradient: the same declared angles and scales"

    def applies(self, case: GradientTermCase) -> bool:
        """Every family (0 where nothing is declared)."""
        return True

    def allowance(self, case: GradientTermCase) -> Allowance:
        """term() on the gradient."""
        return term(case.op, case.u_acc, case.dims, case.kwargs, case.reference)

    def words(self, case: GradientTermCase) -> str:
        """Nothing (the forward's failure names the declaration)."""
        return ""


TERM = DeclaredIntermediates()
GRADIENT_TERM = DeclaredGradientIntermediates()
