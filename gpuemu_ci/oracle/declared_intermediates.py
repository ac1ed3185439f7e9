"""Intermediates an op declares it computes itself from exact values (`[ops.intermediates]`).

A rotary embedding computes its angles `position * inv_freq` from integer positions; a mean multiplies by `1/n`
from an integer count. The reference computes the same quantities from the same exact values, in float64 when
it is given float64 inputs (its main run always is), so nothing it returns shows what rounding them costs: no
input moves, and the working-precision run measures it only if the reference happens to derive them in the
dtype of its inputs. A declaration says what the op does, and the bound counts it (for every family, forward
and gradients):

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
