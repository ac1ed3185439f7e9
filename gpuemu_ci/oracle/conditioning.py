"""The problem's conditioning at the case's own inputs, measured without the reference's cooperation.

A correct kernel computes in its working precision, and a stable one returns, to first order, the exact answer
at inputs each moved by about one rounding of that precision. Where the problem is ill-conditioned (a loss that
is the difference of a log-sum-exp and a logit of 1e10, the square root of a variance that cancels, a norm of a
row whose mean dwarfs its spread) that move changes the answer by far more than the family bound allows, and
so does a correct kernel. The reference, run in float64 on the case's inputs moved that way, measures it:
E = |r(x') - r(x)|, per element the farthest of MOVED_DRAWS moves.

Why this measurement:

- it does not depend on how the reference is written: the reference is called with float64 arrays, whether it
  computes in the dtype of its inputs or casts them to float64 first (`x.astype(np.float64)`, `x.double()`),
  where its run on inputs cast to the working precision (oracle/precision.py) measures nothing;
- it is principled: to first order it is the componentwise condition number of the problem at these inputs
  times the working precision's unit roundoff, the error every backward-stable kernel may make, and it needs
  no model per family;
- it is cheap: MOVED_DRAWS more reference calls, for the cases that fail the family bound only (the others pass
  either way).

Each move is one rounding's worth, u relative, of random sign per element (u the working precision's unit
roundoff: the declared accumulator, else float32; float64 cases are moved in float32 and the measurement scaled
to float64 as the working-precision run's, precision.error_scale), the signs drawn from the case seed with
gpuemu-ci's own generator, so a replay repeats them on any machine. The gradients' model is measured the same
way (oracle/gradients.py), on the upstream gradient moved too.

The `softmax` family is moved relative to x - max along its row, not to x: its kernels subtract an element of
the row, exactly, so their first rounding is of x - max. Moving x itself by u|x| on a row of huge equal values
changes the answer completely, and allowed a masked lane loading 0 into such a row (a real bug) to pass.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.config.model import Family, OpSpec
from gpuemu_ci.oracle import precision
from gpuemu_ci.oracle.terms import row_axis
from gpuemu_ci.rng import SeededRng

MOVED_DRAWS = 3


def moved(
    arrays: Mapping[str, np.ndarray],
    seed: int,
    precision_name: str,
    draw: str,
    shifted: Mapping[str, int] | None = None,
) -> dict[str, np.ndarray]:
    """float64 copies of the float arrays, each element moved by one rounding of `precision_name`, of random
    sign (from `seed` and `draw`): u |x| for a normal number, u times the smallest normal (half the smallest
    subnormal) below it, as rounding to that precision errs; an exact zero stays. An array named in `shifted`
    moves relative to its distance from the largest finite value along that axis. Non-float arrays and
    non-finite values stay."""
    info = dtypes.info(precision_name)
    roundoff, smallest = info.unit_roundoff, info.min_normal
    rng = SeededRng(seed).derive(f"moved_{draw}")
    out: dict[str, np.ndarray] = {}
    for name, a in arrays.items():
        if not dtypes.is_float_dtype(np.asarray(a).dtype):
            out[name] = a
            continue
        x = np.asarray(a, dtype=np.float64)
        bits = rng.derive(name).u64_array(x.size).reshape(x.shape)
        sign = np.where((bits >> np.uint64(63)).astype(bool), 1.0, -1.0)
        finite = np.isfinite(x)
        base = np.abs(x)
        axis = (shifted or {}).get(name)
        if axis is not None and x.ndim and x.size:
            clean = np.where(finite, x, -np.inf)
            row_max = clean.max(axis=axis, keepdims=True)
            base = np.abs(x - np.where(np.isfinite(row_max), row_max, 0.0))
        base = np.where(finite, base, 0.0)
        exact = base == 0  # an exact zero (x, or x - max) rounds to itself: no kernel errs there
        base = np.maximum(base, smallest)
        out[name] = np.where(finite & ~exact, x + roundoff * sign * base, x)
    return out


def shifted_inputs(
    op: OpSpec, logical: Mapping[str, np.ndarray], kwargs: Mapping[str, object]
) -> dict[str, int]:
    """The inputs that move relative to their row's largest value, with the row's axis: a softmax's first."""
    if op.error_model.family is not Family.SOFTMAX or not logical:
        return {}
    return {next(iter(logical)): row_axis(kwargs)}


def moved_inputs(
    op: OpSpec, case_dtype: str, logical: Mapping[str, np.ndarray], kwargs: Mapping[str, object], seed: int
) -> list[dict[str, np.ndarray]]:
    """The MOVED_DRAWS sets of moved inputs the reference is run on for a case (none without a working
    precision below float64 to move by)."""
    working = precision.working_precision(op, case_dtype)
    if working is None:
        return []
    shifted = shifted_inputs(op, logical, kwargs)
    return [moved(logical, seed, working, str(k), shifted) for k in range(MOVED_DRAWS)]


def model(
    reference: np.ndarray, runs: list[np.ndarray], magnitude: np.ndarray | None, working: str | None = None
) -> tuple[np.ndarray, str] | None:
    """The error model the moved runs support (before c and the roundings: precision.empirical_term on the
    run farthest from the reference, per element), and its scale; None when they moved nothing. Outputs below
    the normal range of `working` (the precision the inputs were moved in) count in absolute terms."""
    r = np.asarray(reference, dtype=np.float64)
    usable = [np.asarray(run, dtype=np.float64) for run in runs if np.shape(run) == r.shape]
    if not usable:
        return None
    below = dtypes.info(working).min_normal if working is not None else 0.0
    return precision.empirical_term(r, precision.farthest(r, usable), magnitude, absolute_below=below)


def gradient_inputs(
    op: OpSpec,
    measurement: precision.Measurement,
    logical: Mapping[str, np.ndarray],
    upstream: tuple[np.ndarray | None, ...],
    kwargs: Mapping[str, object],
    seed: int,
) -> tuple[Mapping[str, np.ndarray], tuple[np.ndarray | None, ...]] | None:
    """The inputs and upstream gradients a measurement of the reference's backward runs on
    (precision.gradient_measurements): as they are, moved, or with small values flushed; None where a flush
    would change nothing (the measurement is then the exact gradient again)."""
    grads = {str(i): g for i, g in enumerate(upstream) if g is not None}
    if measurement.moved_in:
        where = measurement.moved_in
        logical = moved(logical, seed, where, f"inputs {where}", shifted_inputs(op, logical, kwargs))
        grads = moved(grads, seed, where, f"upstream {where}")
    elif measurement.flushed_below:
        below = dtypes.info(measurement.flushed_below).min_normal
        flushed = {n: _flushed(a, below) for n, a in logical.items()}
        flushed_grads = {n: _flushed(g, below) for n, g in grads.items()}
        if all(a is logical[n] for n, a in flushed.items()) and all(
            g is grads[n] for n, g in flushed_grads.items()
        ):
            return None
        logical, grads = flushed, flushed_grads
    return logical, tuple(None if g is None else grads[str(i)] for i, g in enumerate(upstream))


def _flushed(a: np.ndarray, below: float) -> np.ndarray:
    """`a` as float64 with the values of smaller magnitude than `below` set to 0 (itself when there are none or
    it holds no floats)."""
    if not dtypes.is_float_dtype(np.asarray(a).dtype):
        return a
    x = np.asarray(a, dtype=np.float64)
    tiny = (np.abs(x) < below) & (x != 0)
    return np.where(tiny, 0.0, x) if np.any(tiny) else a
