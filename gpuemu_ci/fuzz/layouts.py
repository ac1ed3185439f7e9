"""Real memory layouts: the op receives views whose strides differ from C order, not metadata.

- transposed: a contiguous allocation of the shape with its last two dims swapped, viewed back (swapaxes);
- strided: a larger allocation whose gaps hold NaN (floats) or the dtype's maximum (integers), so an op that
  reads past the logical elements or ignores strides produces visibly wrong output;
- broadcast: one dim of size > 1 has stride 0 (the values repeat along it), as `expand` makes;
- odd_size1: size-1 dims carry unusual strides, which a kernel must never use;
- row_padded: a slice `x[..., :N]` of a wider buffer, the most common non-contiguous tensor (padded vocabularies,
  slices of fused projections): inner stride 1, row stride the next multiple of 64 above N (2N + 1 for rows
  shorter than 64), the padding poisoned like the strided layout's gaps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuemu_ci.config.model import Layout
from gpuemu_ci.dtypes import is_float_dtype
from gpuemu_ci.rng import SeededRng

ODD_STRIDE_ELEMENTS = 7919  # a prime: meaningless for a size-1 dim


@dataclass(frozen=True)
class LayoutChoice:
    """The memory layout drawn for one input (and, for a broadcast, the dim that is broadcast)."""

    layout: Layout
    broadcast_dim: int | None = None  # for Layout.BROADCAST


def applicable(layout: Layout, shape: tuple[int, ...]) -> bool:
    """Whether `layout` can be given to an input of `shape` (a transpose needs two dims over 1, a broadcast a
    dim over 1, ...)."""
    if layout is Layout.TRANSPOSED:
        return len(shape) >= 2 and shape[-1] > 1 and shape[-2] > 1
    if layout is Layout.BROADCAST:
        return any(s > 1 for s in shape)
    if layout is Layout.ODD_SIZE1:
        return any(s == 1 for s in shape)
    if layout is Layout.STRIDED:
        return len(shape) >= 1 and all(s > 0 for s in shape)
    if layout is Layout.ROW_PADDED:
        return len(shape) >= 2 and shape[-2] > 1 and shape[-1] > 0
    return True


def choose(
    layouts: tuple[Layout, ...],
    shape: tuple[int, ...],
    contiguous: bool,
    rng: SeededRng,
    whole_rows: bool = False,
) -> LayoutChoice:
    """Contiguous cases stay contiguous; others pick among the op's non-contiguous layouts that fit the shape.
    `whole_rows`: the input's rows are one value (probability rows, rotary tables), so a broadcast may repeat
    rows but never one element along a row."""
    if contiguous:
        return LayoutChoice(Layout.CONTIGUOUS)
    broadcastable = [i for i, s in enumerate(shape) if s > 1 and not (whole_rows and i == len(shape) - 1)]
    options = [
        lay
        for lay in layouts
        if lay is not Layout.CONTIGUOUS
        and applicable(lay, shape)
        and (lay is not Layout.BROADCAST or broadcastable)
    ]
    if not options:
        return LayoutChoice(Layout.CONTIGUOUS)
    layout = rng.choice(options)
    if layout is Layout.BROADCAST:
        return LayoutChoice(layout, rng.derive("broadcast_dim").choice(broadcastable))
    return LayoutChoice(layout)


def broadcast_source(values: np.ndarray, choice: LayoutChoice) -> np.ndarray:
    """The logical values an op sees under a broadcast layout: constant along the broadcast dim."""
    if choice.layout is not Layout.BROADCAST or choice.broadcast_dim is None:
        return values
    first = np.take(values, [0], axis=choice.broadcast_dim)
    return np.broadcast_to(first, values.shape).copy()


def materialize(values: np.ndarray, choice: LayoutChoice) -> np.ndarray:
    """A view with the chosen layout holding exactly `values` (apply broadcast_source first for BROADCAST)."""
    layout = choice.layout
    if layout is Layout.CONTIGUOUS:
        return np.ascontiguousarray(values)
    if layout is Layout.TRANSPOSED:
        return np.ascontiguousarray(np.swapaxes(values, -1, -2)).swapaxes(-1, -2)
    if layout is Layout.STRIDED:
        return _strided(values)
    if layout is Layout.BROADCAST:
        axis = choice.broadcast_dim if choice.broadcast_dim is not None else 0
        first = np.ascontiguousarray(np.take(values, [0], axis=axis))
        view = np.broadcast_to(first, values.shape)
        return np.lib.stride_tricks.as_strided(first, shape=view.shape, strides=view.strides, writeable=False)
    if layout is Layout.ODD_SIZE1:
        base = np.ascontiguousarray(values)
        strides = tuple(
            ODD_STRIDE_ELEMENTS * base.itemsize if size == 1 else stride
            for size, stride in zip(base.shape, base.strides, strict=True)
        )
        return np.lib.stride_tricks.as_strided(base, shape=base.shape, strides=strides)
    if layout is Layout.ROW_PADDED:
        return _row_padded(values)
    raise AssertionError(layout)


def _poison(dtype: np.dtype) -> object:
    if is_float_dtype(dtype):
        return np.nan
    if dtype == np.bool_:
        return True
    return np.iinfo(dtype).max


def _strided(values: np.ndarray) -> np.ndarray:
    """Every other element of the last dim, rows padded by one: gaps everywhere, all poisoned."""
    padded_shape = (*values.shape[:-1], values.shape[-1] * 2)
    if values.ndim >= 2:
        padded_shape = (*values.shape[:-2], values.shape[-2] + 1, values.shape[-1] * 2)
    buffer = np.full(padded_shape, _poison(values.dtype), dtype=values.dtype)
    index = (*tuple(slice(0, s) for s in values.shape[:-1]), slice(0, None, 2))
    if values.ndim >= 2:
        index = (*tuple(slice(0, s) for s in values.shape[:-2]), slice(1, None), slice(0, None, 2))
    view = buffer[index]
    view[...] = values
    return view


ROW_PAD_MULTIPLE = 64


def row_stride(n: int) -> int:
    """The row stride (elements) of a row-padded view of rows of n: the next multiple of 64 above n, or 2n + 1
    for short rows (the buffer stays within twice the view)."""
    if n < ROW_PAD_MULTIPLE:
        return 2 * n + 1
    return (n // ROW_PAD_MULTIPLE + 1) * ROW_PAD_MULTIPLE


def _row_padded(values: np.ndarray) -> np.ndarray:
    """`values` as `buffer[..., :N]` of a buffer whose rows are `row_stride(N)` long, the rest poisoned."""
    n = values.shape[-1]
    buffer = np.full((*values.shape[:-1], row_stride(n)), _poison(values.dtype), dtype=values.dtype)
    view = buffer[..., :n]
    view[...] = values
    return view


def element_strides(array: np.ndarray) -> tuple[int, ...]:
    """The array's strides in elements rather than bytes, as frameworks report them."""
    return tuple(s // array.itemsize for s in array.strides)
