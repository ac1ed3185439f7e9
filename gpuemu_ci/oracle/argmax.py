"""`family = "argmax"`: the op returns indices (top-1 routing, greedy decoding, argmax over logits the kernel
computes itself), the reference returns the scores they index.

Bitwise equality is the wrong rule there: a correct kernel computes the scores in float32, so where the best two
scores lie within their rounding error of each other it may pick either. The rule: the chosen index must be
exactly the reference's where the reference's top score is separated from the others by more than the scores'
error allowance, and, at ties and near-ties, its score may fall short of the best by at most the allowance of
the two (`best - chosen <= a_best + a_chosen`, the allowance of each score from the family bound of the
scores, oracle/bounds.py, and the reference's measured conditioning, oracle/conditioning.py).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gpuemu_ci.oracle.model import Comparator, ErrorStats, Finding
from gpuemu_ci.results.model import FailureKind


def axis_of(kwargs: Mapping[str, object]) -> int:
    """The axis the scores are chosen along: the op's `axis` or `dim` kwarg (an int, not a bool), else the last."""
    for key in ("axis", "dim"):
        value = kwargs.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return -1


def compare_argmax(
    chosen: np.ndarray, scores: np.ndarray, allowed: np.ndarray, axis: int
) -> tuple[ErrorStats, list[Finding]]:
    """Judges indices `chosen` (the scores' shape without `axis`) against the reference `scores` (float64)."""
    scores = np.asarray(scores, dtype=np.float64)
    allowed = np.broadcast_to(np.asarray(allowed, dtype=np.float64), scores.shape)
    axis = axis % scores.ndim if scores.ndim else 0
    expected_shape = scores.shape[:axis] + scores.shape[axis + 1 :]
    index = np.asarray(chosen)
    if index.shape != expected_shape or index.dtype.kind not in "iu":
        return _shape_failure(index, expected_shape)
    total = int(index.size)
    length = scores.shape[axis] if scores.ndim else 0
    outside = (index < 0) | (index >= length)
    safe = np.where(outside, 0, index).astype(np.int64)
    best = np.argmax(np.where(np.isnan(scores), -np.inf, scores), axis=axis)

    def take(values: np.ndarray, i: np.ndarray) -> np.ndarray:
        return np.asarray(np.take_along_axis(values, np.expand_dims(i, axis), axis).squeeze(axis))

    best_score, chosen_score = take(scores, best), take(scores, safe)
    gap = np.where(outside, np.inf, best_score - chosen_score)
    room = take(allowed, best) + take(allowed, safe)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(gap <= 0, 0.0, gap / np.where(room > 0, room, np.inf))
        ratio = np.where((gap > 0) & (room <= 0), np.inf, ratio)
    wrong = ratio > 1.0
    exceeded = int(np.count_nonzero(wrong))
    worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(ratio)), ratio.shape)) if total else None
    stats = ErrorStats(
        comparator=Comparator.ARGMAX,
        headroom=float(ratio[worst]) if worst is not None else 0.0,
        max_abs_error=float(np.max(np.where(np.isfinite(gap), gap, 0.0), initial=0.0)),
        worst_index=worst,
        exceeded=exceeded,
        total=total,
        allowed_at_worst=float(room[worst]) if worst is not None else None,
    )
    findings = []
    if exceeded and worst is not None:
        if outside[worst]:
            detail = f"index {int(index[worst])} is outside 0..{length - 1}"
        else:
            detail = (
                f"chose index {int(index[worst])} (score {chosen_score[worst]:.9g}) where index "
                f"{int(best[worst])} scores {best_score[worst]:.9g}: a gap of {gap[worst]:.3g}, over the "
                f"{room[worst]:.3g} the two scores may err by ({ratio[worst]:.3g}x)"
            )
        findings.append(
            Finding(
                FailureKind.MISMATCH,
                f"{exceeded} of {total} choices are not the best within the scores' error; worst at {worst}: "
                + detail,
            )
        )
    return stats, findings


def _shape_failure(index: np.ndarray, expected: tuple[int, ...]) -> tuple[ErrorStats, list[Finding]]:
    stats = ErrorStats(Comparator.ARGMAX, None, None, None, 0, int(np.prod(expected, dtype=np.int64)))
    if index.shape != expected:
        message = f"shape {tuple(index.shape)} != {expected}, the reference's scores without the argmax axis"
        return stats, [Finding(FailureKind.SHAPE, message)]
    return stats, [Finding(FailureKind.DTYPE, f"dtype {index.dtype} is not an integer index")]
