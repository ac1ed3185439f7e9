"""Gradients of a selection (max-pool, a max, the `exact` family) at ties.

The gradient of a max routes the upstream gradient to the element the max selected. Where a window holds equal
maxima the choice is not unique: the float64 reference routes it to one of them, a correct kernel may route it
to another (PyTorch's bf16 max-pool does: with 8 significant bits many windows hold equal values). Compared
element by element, that is an error as large as the gradient itself. So where the selected input holds equal
values along the selection axis, the gradient is judged per group of tied elements: the group's sum must match
the reference's within the sum of its members' allowances, however it is spread inside the group. An element
that ties with no other is judged alone, so a gradient routed to a non-tied element still fails there (and its
own group, if any, loses what it should have received).
"""

from __future__ import annotations

import numpy as np


def excused_at_ties(
    x: np.ndarray,
    g: np.ndarray,
    r: np.ndarray,
    allowed: np.ndarray,
    axis: int = -1,
    reach: int | None = None,
) -> np.ndarray:
    """Which elements of the gradient `g` (reference `r`, allowance `allowed`) of the selected input `x` are
    judged by their tie group instead: members of a group of two or more equal values of `x` in one line
    along `axis` whose group sum of `g` is within the summed allowance of the reference's. With `reach` (a
    pooling's window length) equal values further apart than a window spans (no window holds both, nor a
    chain of overlapping windows) are separate groups; without it a group spans the line (a row's max)."""
    x = np.asarray(x, dtype=np.float64)
    r = np.asarray(r, dtype=np.float64)
    if x.shape != r.shape or x.ndim == 0 or x.size == 0:
        return np.zeros(r.shape, dtype=bool)
    axis = axis % x.ndim
    length = x.shape[axis]

    def lines(a: np.ndarray) -> np.ndarray:
        return np.moveaxis(np.broadcast_to(np.asarray(a, dtype=np.float64), r.shape), axis, -1).reshape(
            -1, length
        )

    values = lines(x).ravel()
    rows = np.repeat(np.arange(values.size // length), length)
    positions = np.tile(np.arange(length), values.size // length)
    order = np.lexsort((positions, values, rows))
    sorted_values, sorted_rows, sorted_positions = values[order], rows[order], positions[order]
    starts = np.ones(values.size, dtype=bool)  # NaN != NaN: a NaN is a group of its own
    starts[1:] = (sorted_values[1:] != sorted_values[:-1]) | (sorted_rows[1:] != sorted_rows[:-1])
    if reach is not None and reach > 0:
        starts[1:] |= np.diff(sorted_positions) >= reach
    ids = np.empty(values.size, dtype=np.int64)
    ids[order] = np.cumsum(starts) - 1
    gl, rl, al = lines(g).ravel(), lines(r).ravel(), lines(allowed).ravel()
    finite = np.isfinite(gl) & np.isfinite(rl) & np.isfinite(al)
    size = np.bincount(ids)
    unjudgeable = np.bincount(ids, weights=~finite)
    g_sum = np.bincount(ids, weights=np.where(finite, gl, 0.0))
    r_sum = np.bincount(ids, weights=np.where(finite, rl, 0.0))
    a_sum = np.bincount(ids, weights=np.where(finite, al, 0.0))
    group_ok = (size > 1) & (unjudgeable == 0) & (np.abs(g_sum - r_sum) <= a_sum)
    excused = group_ok[ids].reshape(np.moveaxis(np.empty(r.shape), axis, -1).shape)
    return np.moveaxis(excused, -1, axis)
