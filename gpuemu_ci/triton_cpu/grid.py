"""Every program of a launch at once (issue #29): one Python pass over the kernel in which each value carries a
leading program axis.

During a vectorised launch every interpreter value's data has shape (B, *block) where B is the number of programs
in the chunk (or 1 for a value that is the same in every program: constants, arguments, `tl.arange`); a scalar's
block is (1,), as in the interpreter. `tl.program_id` is the column of the chunk's program ids (in the launch's
seeded order), loads and stores gather and scatter every program's lanes, reductions, scans and `tl.dot` run
over the program axis. NumPy computes each program's slice exactly as it computes that program alone (the same
kernels on the same contiguous rows), so the outputs are bitwise those of the per-program interpreter.

What does not vectorise stops the pass with `NotVectorisable`, and the layer re-runs the launch one program at
a time after restoring its arguments' memory (layer.py): a Python `if`/`while`/`range` on a value that differs
between programs, atomics, a read of what another program wrote (or a write of what another program read or
wrote) in the same launch, an access out of bounds (so that its finding names the program the per-program
order reaches first), prints, histograms, gathers of descriptors and scaled dots, and any construct the pass does
not know. Grids are run in chunks of at most `CHUNK_PROGRAMS` programs, and of fewer where a block of the kernel's
times the chunk's programs would pass `VALUE_BUDGET_BYTES` (`TooLarge`).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from gpuemu_ci.triton_cpu import active, lowp
from gpuemu_ci.triton_cpu.boundary import Handle, Patch
from gpuemu_ci.triton_cpu.touches import Access, Touches, apart, apart_between_programs

MODULE = "triton.runtime.interpreter"
CHUNK_PROGRAMS = 1024
# The most one batched value may take (its block times the chunk's programs, at 8 bytes an element): a kernel
# holds a handful of blocks live, and a gate runs one worker per core.
VALUE_BUDGET_BYTES = 64 << 20


class NotVectorisable(Exception):
    """Why this launch runs one program at a time."""


class Divergent(NotVectorisable):
    """A Python `if`/`while`/`range` on a value that differs between the programs of the pass: `keys` holds
    each program's value (in the batch's order), so that the programs can be re-run in groups that agree."""

    def __init__(self, what: str, keys: np.ndarray) -> None:
        super().__init__(what)
        self.keys = keys


class TooLarge(Divergent):
    """A block of `elements` per program would take more than VALUE_BUDGET_BYTES for the chunk's programs: the
    chunk is run again in pieces of `fits` consecutive programs (`keys` numbers the pieces)."""

    def __init__(self, elements: int, programs: int) -> None:
        self.fits = max(1, VALUE_BUDGET_BYTES // (8 * elements))
        super().__init__(
            f"a block of {elements} elements for {programs} programs", np.arange(programs) // self.fits
        )


def _within_budget(shape: tuple[int, ...]) -> None:
    batch = active.batch()
    if batch is None or batch.size <= 1:
        return
    elements = int(np.prod(shape, dtype=np.int64))
    if 8 * elements * batch.size > VALUE_BUDGET_BYTES:
        raise TooLarge(elements, batch.size)


@dataclass
class Batch:
    """The chunk of programs being run together, in the launch's order."""

    coords: np.ndarray  # (B, 3) int32 program coordinates
    pids: np.ndarray  # (B,) linear program ids
    # Which programs read and wrote each buffer's elements so far in the launch (touches.py), by buffer start.
    readers: dict[int, Touches] = field(default_factory=dict)
    writers: dict[int, Touches] = field(default_factory=dict)

    @property
    def size(self) -> int:
        """How many programs the batch runs."""
        return int(self.pids.size)


def lane_programs(batch: Batch, shape: tuple[int, ...]) -> np.ndarray:
    """The program id of every lane of a (B, *block) value of the batch, flat."""
    pids = batch.pids if shape[0] == batch.size else batch.pids[:1]
    return np.broadcast_to(pids.reshape((shape[0],) + (1,) * (len(shape) - 1)), shape).ravel()


def broadcast(*arrays: np.ndarray) -> list[np.ndarray]:
    """The arrays at their common (B, *block) shape, contiguous (the interpreter's C++ loads want that); an
    array already so is itself (NumPy's broadcasting helpers cost microseconds of Python each)."""
    shape = arrays[0].shape
    if any(a.shape != shape for a in arrays):
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
    return [
        a if a.shape == shape and a.flags.c_contiguous else np.ascontiguousarray(np.broadcast_to(a, shape))
        for a in arrays
    ]


# ---- who touched what: a program that depends on another runs per program -----------------------------------


def _touches(table: dict[int, Touches], key: int, size: int) -> Touches:
    found = table.get(key)
    if found is None:
        found = table[key] = Touches(size)
    return found


_WRITE_CLASH = "programs write what other programs of the launch read or wrote"
_READ_CLASH = "programs read what other programs of the launch wrote"


def watch(
    batch: Batch, groups: list[tuple[Any, np.ndarray, np.ndarray]], pids: np.ndarray, write: bool
) -> None:
    """Record an access's lanes (grouped by buffer: allocation, lanes, element index) with their program ids;
    raises NotVectorisable where a program meets another program's access in this launch. A buffer's record
    is made at its first access of that kind: until then no program can have touched it that way, so the
    check against it is skipped (most launches read some buffers and write others). Exact, per element (an
    access spread over several buffers); `watch_rows` answers the same for an access in one buffer."""
    for allocation, lanes, index in groups:
        size = (allocation.buffer_end - allocation.buffer_start) // allocation.itemsize + 1
        key = allocation.buffer_start
        _exactly(batch, key, size, index, pids[lanes], write)


def _exactly(
    batch: Batch,
    key: int,
    size: int,
    index: np.ndarray,
    mine: np.ndarray,
    write: bool,
    access: Access | None = None,
) -> None:
    """The per-element check and record of one buffer's lanes (their element index, their programs; a read
    given as an `access` too is logged rather than marked: only what it is checked against must be exact)."""
    written, read = batch.writers.get(key), batch.readers.get(key)
    if write:
        for touched in (written, read):
            if touched is not None:
                touched.make_exact()
                if touched.others(index, mine):
                    raise NotVectorisable(_WRITE_CLASH)
        written = _touches(batch.writers, key, size)
        written.make_exact()
        written.mark(index, mine)
        if written.others(index, mine):  # two programs in this very store
            raise NotVectorisable(_WRITE_CLASH)
    else:
        if written is not None:
            written.make_exact()
            if written.others(index, mine):
                raise NotVectorisable(_READ_CLASH)
        read = _touches(batch.readers, key, size)
        if access is not None:
            read.add(access)
            return
        read.make_exact()
        read.mark(index, mine)


def watch_rows(batch: Batch, allocation: Any, access: Access, write: bool) -> None:
    """`watch` for an access whose active lanes all lie in one buffer (`allocation`'s), given by rows: first
    by the programs' envelopes, which prove most accesses apart from every other program's; where they
    cannot, per element, as `watch` does (the same answer either way: see touches.py)."""
    size = (allocation.buffer_end - allocation.buffer_start) // allocation.itemsize + 1
    key = allocation.buffer_start
    written, read = batch.writers.get(key), batch.readers.get(key)
    theirs = [t for t in ((written, read) if write else (written,)) if t is not None]
    if not any(t.exact for t in theirs):
        mine = access.envelopes() if theirs or write else None
        if mine is None or (
            all(apart(t.envelopes(), mine) for t in theirs) and (not write or apart_between_programs(mine))
        ):
            _touches(batch.writers if write else batch.readers, key, size).add(access)
            return
    _exactly(batch, key, size, access.index, access.lane_pids(), write, access)


# ---- the builder, batched ----------------------------------------------------------------------------------


def _handle(data: np.ndarray, dtype: Any) -> Any:
    return sys.modules[MODULE].TensorHandle(data, dtype)


def _lift(original: Callable[..., Any]) -> Callable[..., Any]:
    """A method that makes a value from nothing: the same value, uniform (program axis of 1)."""

    def lifted(self: Any, *args: Any, **kwargs: Any) -> Any:
        made = original(self, *args, **kwargs)
        if active.batch() is not None and isinstance(getattr(made, "data", None), np.ndarray):
            made.data = made.data[None]
        return made

    return lifted


def _refuse(what: str) -> Callable[..., Any]:
    def refused(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotVectorisable(what)

    return refused


def _program_id(self: Any, axis: int) -> Any:
    batch = active.batch()
    assert batch is not None
    import triton.language as tl

    return _handle(np.ascontiguousarray(batch.coords[:, axis : axis + 1]), tl.int32)


def _splat(self: Any, ret_ty: Any, arg: Handle) -> Any:
    module = sys.modules[MODULE]
    shape = tuple(ret_ty.shape)
    _within_budget(shape)
    data = arg.data.reshape(arg.data.shape[0], -1)[:, :1]
    out = np.empty((data.shape[0], *shape), dtype=module._get_np_dtype(arg.dtype))
    out[...] = data.reshape(
        (data.shape[0],) + (1,) * len(shape)
    )  # each program's scalar, cast as astype does
    return _handle(out, arg.dtype.scalar)


def _unsplat(self: Any, arg: Handle) -> Any:
    data = arg.data.reshape(arg.data.shape[0], -1)[:, :1]
    return _handle(np.ascontiguousarray(data), arg.dtype.scalar)


def _reshape(self: Any, arg: Handle, shape: Any, allow_reorder: Any) -> Any:
    return _handle(arg.data.reshape((arg.data.shape[0], *tuple(shape))), arg.dtype.scalar)


def _trans(self: Any, arg: Handle, perm: Any) -> Any:
    return _handle(np.transpose(arg.data, (0, *tuple(p + 1 for p in perm))), arg.dtype.scalar)


def _expand_dims(self: Any, arg: Handle, axis: int) -> Any:
    return _handle(np.expand_dims(arg.data, axis + 1 if axis >= 0 else axis), arg.dtype.scalar)


def _broadcast_to(self: Any, arg: Handle, shape: Any) -> Any:
    _within_budget(tuple(shape))
    return _handle(np.broadcast_to(arg.data, (arg.data.shape[0], *tuple(shape))), arg.dtype.scalar)


def _cat(self: Any, lhs: Handle, rhs: Handle) -> Any:
    rows = max(lhs.data.shape[0], rhs.data.shape[0])
    a = np.broadcast_to(lhs.data, (rows, *lhs.data.shape[1:]))
    b = np.broadcast_to(rhs.data, (rows, *rhs.data.shape[1:]))
    return _handle(np.concatenate([a, b], axis=1), lhs.dtype.scalar)


def _join(self: Any, lhs: Handle, rhs: Handle) -> Any:
    a, b = np.broadcast_arrays(lhs.data, rhs.data)
    return _handle(np.stack([a, b], axis=-1), lhs.dtype.scalar)


def _gather(self: Any, src: Handle, indices: Handle, axis: int) -> Any:
    rows = max(src.data.shape[0], indices.data.shape[0])
    s = np.broadcast_to(src.data, (rows, *src.data.shape[1:]))
    i = np.broadcast_to(indices.data, (rows, *indices.data.shape[1:]))
    return _handle(np.take_along_axis(s, i, axis=axis + 1), src.dtype.scalar)


def builder_methods(module: ModuleType) -> dict[str, Callable[..., Any]]:
    """The InterpreterBuilder methods replaced during a vectorised launch (the layer's own wrappers of loads,
    stores and dots handle the program axis themselves). Built once per interpreter: what it lifts are the
    interpreter's own constructors, what it refuses never calls the method it replaces."""
    builder = module.InterpreterBuilder
    found = _methods_cache.get(id(builder))
    if found is None:
        found = _methods_cache[id(builder)] = _builder_methods(builder)
    return found


_methods_cache: dict[int, dict[str, Callable[..., Any]]] = {}


def _builder_methods(builder: Any) -> dict[str, Callable[..., Any]]:
    replaced: dict[str, Callable[..., Any]] = {
        "create_get_program_id": _program_id,
        "create_splat": _splat,
        "create_unsplat": _unsplat,
        "create_reshape": _reshape,
        "create_trans": _trans,
        "create_expand_dims": _expand_dims,
        "create_broadcast": _broadcast_to,
        "create_cat": _cat,
        "create_join": _join,
        "create_gather": _gather,
    }
    for name in dir(builder):
        if (name.startswith("get_") and not name.endswith("_ty")) or name in (
            "create_make_range",
            "create_get_num_programs",
        ):
            replaced[name] = _lift(getattr(builder, name))
    for name in (
        "create_histogram",
        "create_print",
        "create_atomic_rmw",
        "create_atomic_cas",
        "create_atomic_poll",
        "create_dot_scaled",
        "create_inline_asm",
        "create_extern_elementwise",
        "create_make_tensor_descriptor",
        "create_descriptor_load",
        "create_descriptor_store",
        "create_descriptor_gather",
        "create_descriptor_scatter",
    ):
        if hasattr(builder, name):
            replaced[name] = _refuse(f"`{name.removeprefix('create_')}`")
    return {name: fn for name, fn in replaced.items() if hasattr(builder, name)}


# ---- reductions, scans and Python's view of values ---------------------------------------------------------


_Reducers = dict[Any, tuple[Callable[..., Any] | None, Callable[..., Any] | None]]
_reducers: dict[int, _Reducers] = {}


def _reduce_ops(module: ModuleType) -> _Reducers:
    """The reductions the pass runs itself, by combine function (made once per Triton)."""
    import triton.language as tl

    found = _reducers.get(id(tl.standard))
    if found is None:
        found = _reducers[id(tl.standard)] = _make_reduce_ops(tl)
    return found


def _make_reduce_ops(tl: Any) -> _Reducers:
    std = tl.standard
    low, high = lowp.widened(np.nanmin), lowp.widened(np.nanmax)
    first_low, first_high = lowp.widened(np.nanargmin), lowp.widened(np.nanargmax)
    return {
        std._argmin_combine_tie_break_left: (low, first_low),
        std._argmin_combine_tie_break_fast: (low, first_low),
        std._argmax_combine_tie_break_left: (high, first_high),
        std._argmax_combine_tie_break_fast: (high, first_high),
        std._elementwise_max: (high, None),
        std._elementwise_min: (low, None),
        std._sum_combine: (lowp.block_sum, None),  # 16-bit floats as the GPU's tree, as ReduceOps.sum is
    }


def _tensor(data: np.ndarray, dtype: Any, block: tuple[int, ...]) -> Any:
    import triton.language as tl

    module = sys.modules[MODULE]
    data = data.astype(module._get_np_dtype(dtype), copy=False)
    if block:
        return tl.core.tensor(_handle(data, dtype.scalar), tl.block_type(dtype, list(block)))
    return tl.core.tensor(_handle(data.reshape(data.shape[0], 1), dtype.scalar), dtype)


def reduce(input: Any, axis: Any, combine_fn: Any, keep_dims: bool = False, **kwargs: Any) -> Any:
    """`tl.reduce` over every program's block at once (the interpreter's fast paths only)."""
    module = sys.modules[MODULE]
    values = input if isinstance(input, tuple) else (input,)
    ops = _reduce_ops(module).get(combine_fn)
    if ops is None:
        raise NotVectorisable("a reduction with a custom combine function")
    value_op, index_op = ops
    first = values[0]
    shape = tuple(first.shape)
    data = first.handle.data
    if axis is None:
        data, where, block_axis = data.reshape(data.shape[0], -1), 1, None
    else:
        block_axis = axis if axis >= 0 else axis + len(shape)
        where = block_axis + 1
    if block_axis is None:
        kept: tuple[int, ...] = (1,) * len(shape) if keep_dims else ()
    else:
        kept = shape[:block_axis] + ((1,) if keep_dims else ()) + shape[block_axis + 1 :]
    results = []
    if value_op is not None:
        out = value_op(data, axis=where, keepdims=keep_dims and axis is not None)
        results.append(_tensor(out.reshape((data.shape[0], *kept)), first.dtype, kept))
    if index_op is not None:
        import triton.language as tl

        idx = index_op(data, axis=where, keepdims=keep_dims and axis is not None)
        results.append(_tensor(idx.reshape((data.shape[0], *kept)), tl.int32, kept))
    if not isinstance(input, tuple):
        return results[0]
    return tuple(results)


def scan(input: Any, axis: int, combine_fn: Any, reverse: bool = False, **kwargs: Any) -> Any:
    """`tl.associative_scan` over each program's block (cumulative sums and products; any other combine
    function stops the pass)."""
    import triton.language as tl

    values = input if isinstance(input, tuple) else (input,)
    if len(values) != 1 or combine_fn not in (tl.standard._sum_combine, tl.standard._prod_combine):
        raise NotVectorisable("a scan with a custom combine function")
    value = values[0]
    shape = tuple(value.shape)
    where = (axis if axis >= 0 else axis + len(shape)) + 1
    data = value.handle.data
    if reverse:
        data = np.ascontiguousarray(np.flip(data, axis=where))
    out = (np.cumsum if combine_fn is tl.standard._sum_combine else np.cumprod)(data, axis=where)
    if reverse:
        out = np.ascontiguousarray(np.flip(out, axis=where))
    result = _tensor(out, value.dtype, shape)
    return (result,) if isinstance(input, tuple) else result


def _uniform_scalar(self: Any, what: str) -> Any:
    data = self.handle.data
    if data.size > 1 and not np.all(data == data.flat[0]):
        batch = active.batch()
        why = f"{what} on a value that differs between programs"
        if batch is not None and data.shape[0] == batch.size and data.size == batch.size:
            raise Divergent(why, data.reshape(batch.size))
        raise NotVectorisable(why)
    return data.flat[0]


def block_elements(block_type: Any) -> int:
    """Elements of a block type. Its shape is a Python list, or (Triton 3.6) a Triton tuple that NumPy cannot
    reduce: counted over its items."""
    return math.prod(int(d) for d in block_type.shape)


def _bool(self: Any) -> bool:
    if self.type.is_block() and block_elements(self.type) != 1:
        return True  # the interpreter's view of a block
    return bool(_uniform_scalar(self, "a Python `if`/`while`"))


def _index(self: Any) -> int:
    return int(_uniform_scalar(self, "a loop bound or index"))


def _transpose(self: Any) -> Any:
    import triton.language as tl

    data = self.handle.data
    if data.ndim <= 2:
        return self
    block = list(self.type.shape)
    block[-1], block[-2] = block[-2], block[-1]
    handle = _handle(np.swapaxes(data, -1, -2), self.handle.dtype)
    return tl.core.tensor(handle, tl.core.block_type(self.dtype, block))


def language_patches() -> list[Patch]:
    """(owner, name, value) set for the launch after the interpreter's own `_patch_lang`."""
    import triton.language as tl

    return [
        (tl, "reduce", reduce),
        (tl.core, "reduce", reduce),
        (tl, "associative_scan", scan),
        (tl.core, "associative_scan", scan),
        (tl.tensor, "__bool__", _bool),
        (tl.tensor, "__index__", _index),
        (tl.tensor, "T", property(_transpose)),
    ]
