"""The one interception layer over Triton's CPU interpreter (TRITON_INTERPRET=1).

For the duration of an op call (`intercepted`), the interpreter's grid executor and a few of its builder's
methods are replaced, and restored afterwards:

- the grid runs its programs in a permutation drawn from the case seed (the determinism re-run draws another),
  so atomics are applied in that order and a kernel that relies on program 0 running first is seen to;
- every active lane of every load, store and atomic is checked against the kernel's tensor arguments before
  the access happens (memory.py); an access outside them stops the kernel with `KernelFault` and is recorded
  as an `out_of_bounds` finding: kernel, program id, argument, element offset, how far out, source line;
- each launch keeps a shadow of which program wrote each element: a program that reads what another program
  of the same launch wrote (without an atomic first), or overwrites it with a different value, is a `race`
  finding: on a GPU the programs of a launch run concurrently, in any order;
- masked-off lanes of a load without `other` read 0, as NVIDIA's and AMD's lowering gives them (the sites are
  noted: Triton leaves those lanes undefined), or NaN/Inf and loud integers in the "poison" mode (numerics.py);
- bfloat16 and fp8 values are real numbers rounded as the GPU rounds them (lowp.py, lowp_builder.py);
- fp32 `tl.dot` runs at its `input_precision` (TF32 by default, as on the GPU) and the precisions used are
  reported, so the error model can allow for TF32 where the op's family allows it;
- a launch runs every program at once where it can (vectorised.py, grid.py), else one program at a time, with
  the same outputs and findings; pointers keep the argument they were made from (provenance.py).

`boolops.install` (Python `and`/`or` on tensors) is not per call: it is a fix of the interpreter, installed
once when the interpreter module is imported (backends/triton_probe.py).
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuemu_ci.triton_cpu import (
    autotune,
    boolops,
    grid,
    guard,
    imported,
    internal,
    lowp,
    lowp_builder,
    numerics,
    replay,
    spent,
    vectorised,
)
from gpuemu_ci.triton_cpu.memory import Allocation, Lanes, Memory, Violation
from gpuemu_ci.triton_cpu.provenance import BASE, PROVENANCE, base_of, derived, is_pointer
from gpuemu_ci.triton_cpu.report import OUT_OF_BOUNDS, RACE, TAMPERED, TritonReport
from gpuemu_ci.triton_cpu.touches import Access

MODULE = "triton.runtime.interpreter"
_HERE = os.path.dirname(os.path.abspath(__file__))
MAX_POISON_SITES = 8


class KernelFault(Exception):
    """A kernel's access outside its arguments: the launch stops before the access happens."""


@dataclass(frozen=True)
class CallSettings:
    seed: int  # the case seed: program order and integer poison derive from it
    call: int = 0  # 0: the op's call, 1: the determinism re-run (another program order)
    sanitize: bool = True  # `[ops.triton] sanitize = false` turns the whole layer off
    vectorise: bool | None = None  # every program at once where it can (grid.py); None: `set_vectorise`'s
    replay: bool = True  # a vectorised launch replays the tape of an earlier one where it can (replay.py)
    # What masked-off lanes of a load without `other` (and of an atomic) read: ZERO as NVIDIA and AMD give them,
    # or POISON (NaN, +Inf, -Inf; loud integers) at every such site, or only at `poison_sites` when given.
    masked_lanes: str = "zero"
    poison_sites: frozenset[str] | None = None
    seeded_order: bool = True  # False: the programs of a launch in their plain order (a probe, probes.py)
    ieee_dots: bool = False  # True: every fp32 `tl.dot` at full precision, whatever it asked (a probe)


ZERO, POISON = "zero", "poison"


@dataclass
class _Launch:
    kernel: str
    grid: tuple[int, int, int]
    memory: Memory
    program: tuple[int, int, int] = (0, 0, 0)
    pid: int = 0
    synchronised: bool = False  # this program has done an atomic: its later reads may see other programs'
    race_found: bool = False


@dataclass
class _Call:
    settings: CallSettings
    launches: int = 0
    findings: list[tuple[str, str]] = field(default_factory=list)
    dot_precisions: set[str] = field(default_factory=set)
    # Sites of fp32 dots at TF32 (site -> precision), and those that left `input_precision` at its default.
    dot_sites: dict[str, str] = field(default_factory=dict)
    dot_defaulted: dict[str, None] = field(default_factory=dict)
    undefined: dict[str, None] = field(default_factory=dict)  # loads (and atomics) with masked-off lanes
    atomics: bool = False  # a launch of several programs ran an atomic: its outcome may follow their order
    notes: dict[str, None] = field(default_factory=dict)
    launch: _Launch | None = None
    site_lookups: int = 0  # source lines of masked loads and `and`/`or`: a few per call, not one per load
    unsupported: str = ""  # why this Triton's interpreter could not be patched
    gaps: set[str] = field(default_factory=set)  # constructs the interpreter cannot run (inline asm, extern)
    vectorised: int = 0  # launches run with every program at once
    # Of those, the launches whose programs diverged and ran in k > 1 groups that agree: k -> how many.
    grouped: dict[int, int] = field(default_factory=dict)
    per_program: dict[str, int] = field(default_factory=dict)  # launches run one program at a time, by reason
    # Of the vectorised launches, those replayed from a tape: not in the report (it depends on what the
    # process ran before), for benchmarks and tests.
    replayed: int = 0
    installed: list[tuple[Any, str, Any]] = field(default_factory=list)  # the hooks set: (owner, name, hook)
    internal_error: str = ""  # the layer's own code raised (LayerError): the tool's error, not the kernel's
    patches: int = 0  # times the hooks were set during the call (once; more means someone undid them)

    def looked_up(self) -> bool:
        """Whether there is room for one more source-line lookup in this call (they walk the stack)."""
        self.site_lookups += 1
        return self.site_lookups <= 4 * MAX_POISON_SITES

    def report(self) -> TritonReport:
        return TritonReport(
            self.settings.sanitize and not self.unsupported,
            self.launches,
            tuple(self.findings),
            tuple(sorted(self.dot_precisions)),
            tuple(self.undefined),
            tuple(self.notes) + ((self.unsupported,) if self.unsupported else ()),
            tuple(sorted(self.gaps)),
            self.vectorised,
            tuple(sorted(self.per_program.items())),
            tuple(sorted(self.grouped.items())),
            tuple(sorted(self.dot_sites.items())),
            tuple(self.dot_defaulted),
            self.settings.masked_lanes,
            self.atomics,
            internal_error=self.internal_error,
        )

    def poisons(self, site: str) -> bool:
        """Whether masked-off lanes at this site read poison in this call (else 0, as on the GPU)."""
        wanted = self.settings.poison_sites
        return self.settings.masked_lanes == POISON and (wanted is None or site in wanted)

    def note_undefined(self, what: str) -> str | None:
        """Record a load (or atomic) with masked-off lanes and no `other`; returns its site when looked up (a
        probe that poisons chosen sites looks every one up)."""
        if self.settings.poison_sites is None and not (
            len(self.undefined) < MAX_POISON_SITES and self.looked_up()
        ):
            return None
        assert self.launch is not None
        site = f"`{self.launch.kernel}` at {_site()}{what}"
        if len(self.undefined) < MAX_POISON_SITES:
            self.undefined.setdefault(site)
        return site


# "dot_defaulted": the `tl.dot` being built left `input_precision` (and `allow_tf32`) unset.
_state: dict[str, Any] = {"call": None, "restore": [], "vectorise": True, "dot_defaulted": False}
# Kernels whose launches cannot vectorise whatever their data (atomics, a custom combine function, prints...):
# their later launches go straight to one program at a time. Keyed by the kernel's function and constexprs.
_STATIC_REASONS = ("`", "a reduction with a custom", "a scan with a custom", "tuple or descriptor")
_per_program_kernels: dict[Any, str] = {}


@dataclass
class _Backoff:
    """A kernel (at one launch signature) whose last vectorised try fell back for a reason of its data."""

    why: str
    skip: int  # launches left to run per program directly before the next try
    wait: int  # the skip set at the last fallback (doubles with each fallback)


# Within one op call, launches of such a kernel run per program directly after its first fallback (doubling
# after each further one, up to MAX_BACKOFF): the per-program run is the reference, so either way the outputs and
# findings are the same, and a kernel that keeps falling back pays a stopped pass on 1 launch in 5, then 9 ... 65.
FIRST_BACKOFF = 4
MAX_BACKOFF = 64
REMEMBERED = "an earlier launch of the kernel could not run vectorised"
_fell_back: dict[Any, _Backoff] = {}


def set_vectorise(enabled: bool) -> None:
    """The default of `CallSettings.vectorise` in this process (the bitwise comparison turns it off)."""
    _state["vectorise"] = enabled


def _triton_dir() -> str:
    import triton

    return str(os.path.dirname(os.path.abspath(triton.__file__)))  # triton is untyped here


def _site() -> str:
    """`kernel.py:42 (in _fwd)`: the innermost frame of user code (the kernel or a jit helper it called); during
    a replay, the line the traced pass was at."""
    replayed = replay.current_site()
    if replayed is not None:
        return replayed
    skip = (_triton_dir(), _HERE, os.path.dirname(np.__file__))
    frame = sys._getframe(1)
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if not name.startswith(skip):
            return f"{os.path.basename(name)}:{frame.f_lineno} (in {frame.f_code.co_name})"
        frame = frame.f_back  # type: ignore[assignment]
    return "an unknown line"


def _active_launch() -> tuple[_Call, _Launch] | tuple[None, None]:
    call = _state["call"]
    if call is None or call.launch is None:
        return None, None
    return call, call.launch


def _active_lanes(pointers: np.ndarray, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """(addresses of the active lanes, flat, and the flat mask or None when every lane is active)."""
    flat = np.ravel(pointers)
    if mask is None:
        return flat, None
    m = np.ravel(mask if np.shape(mask) == np.shape(pointers) else np.broadcast_to(mask, np.shape(pointers)))
    if m.all():
        return flat, None
    return flat[m], m


def _out_of_bounds(call: _Call, launch: _Launch, access: str, violation: Violation, active: int) -> None:
    message = (
        f"{access} out of bounds in kernel `{launch.kernel}`, program {launch.program} of grid {launch.grid}, "
        f"at {_site()}: {violation.where}; {violation.lanes_out} of {active} active lanes out of bounds"
    )
    call.findings.append((OUT_OF_BOUNDS, message))
    raise KernelFault(message)


def _checked(
    access: str, pointers: np.ndarray, mask: np.ndarray | None, base: str | None = None
) -> tuple[Lanes, np.ndarray | None] | None:
    """Bounds-check an access's active lanes (against `base`, the argument the pointers come from, when
    known); returns their addresses and the flat mask as `_active_lanes` does (None when no launch is
    watched), so that the race checks need not flatten the mask again."""
    call, launch = _active_launch()
    if call is None or launch is None:
        return None
    flat, flat_mask = _active_lanes(pointers, mask)
    addresses = Lanes(flat)
    violation = launch.memory.check(addresses, base)
    if violation is not None:
        if grid.active() is not None:  # reported by the per-program run, in its order
            raise grid.NotVectorisable("an access out of bounds")
        _out_of_bounds(call, launch, access, violation, addresses.size)
    return addresses, flat_mask


def _race(call: _Call, launch: _Launch, allocation: Allocation, other: int, element: int, what: str) -> None:
    if launch.race_found:
        return
    launch.race_found = True
    _, gy, gz = launch.grid
    writer = (other // (gy * gz), (other // gz) % gy, other % gz)
    offset = (
        allocation.buffer_start + element * allocation.itemsize - allocation.base
    ) // allocation.itemsize
    call.findings.append(
        (
            RACE,
            f"programs of kernel `{launch.kernel}` (grid {launch.grid}) depend on each other's order: program "
            f"{launch.program} {what} element offset {offset} of `{allocation.name}` that program {writer} "
            f"wrote in the same launch, at {_site()}. On a GPU the programs of a launch run concurrently and "
            "in any order: use an atomic, or a separate launch",
        )
    )


def _watch_read(addresses: np.ndarray) -> None:
    call, launch = _active_launch()
    if call is None or launch is None or launch.synchronised or launch.race_found or addresses.size == 0:
        return
    groups, _ = launch.memory.locate(addresses)
    for allocation, _lanes, index in groups:
        shadow = launch.memory.shadows.get(allocation.buffer_start)
        if shadow is None:
            continue
        writers = shadow[index]
        foreign = (writers >= 0) & (writers != launch.pid)
        if foreign.any():
            first = int(np.flatnonzero(foreign)[0])
            _race(call, launch, allocation, int(writers[first]), int(index[first]), "read")
            return


def _watch_write(
    addresses: np.ndarray, pointers: np.ndarray, values: np.ndarray, mask: np.ndarray | None
) -> None:
    call, launch = _active_launch()
    if call is None or launch is None or addresses.size == 0:
        return
    module = sys.modules[MODULE]
    groups, _ = launch.memory.locate(addresses)
    new_values = None
    for allocation, lanes, index in groups:
        shadow = launch.memory.shadow(allocation)
        writers = shadow[index]
        foreign = (writers >= 0) & (writers != launch.pid)
        if foreign.any() and not launch.race_found:
            if new_values is None:
                flat = np.ravel(np.broadcast_to(values, np.shape(pointers)))
                new_values = np.ascontiguousarray(flat if mask is None else flat[mask])
            clash = np.flatnonzero(lanes)[foreign]
            where = np.ascontiguousarray(addresses[clash])
            fresh = np.ascontiguousarray(new_values[clash])
            old = module._interpreter.load(
                where, np.ones(where.shape, dtype=bool), np.zeros_like(fresh), fresh.dtype
            )
            old = np.ascontiguousarray(old, dtype=fresh.dtype)
            before, after = old.view(np.uint8), fresh.view(np.uint8)
            differs = (before.reshape(old.size, -1) != after.reshape(fresh.size, -1)).any(axis=1)
            if differs.any():
                first = int(np.flatnonzero(foreign)[int(np.flatnonzero(differs)[0])])
                _race(
                    call,
                    launch,
                    allocation,
                    int(writers[first]),
                    int(index[first]),
                    "overwrote with another value",
                )
        shadow[index] = launch.pid


# ---- the replaced methods ------------------------------------------------------------------------------


def _batched_load_operands(ptrs: Any, mask: Any, other: Any) -> tuple[Any, Any, Any]:
    """A vectorised load's pointers, mask and `other` at one (programs, *block) shape."""
    module = sys.modules[MODULE]
    arrays = [ptrs.data, mask.data] + ([] if other is None else [other.data])
    shaped = grid.broadcast(*arrays)
    ptrs = module.TensorHandle(shaped[0], ptrs.dtype, dict(ptrs.attr))
    mask = module.TensorHandle(shaped[1], mask.dtype)
    if other is not None:
        other = module.TensorHandle(shaped[2], other.dtype)
    return ptrs, mask, other


def _watch_batched(
    pointers: np.ndarray, flat_mask: np.ndarray | None, addresses: Lanes, write: bool
) -> tuple[Allocation, Access] | None:
    """A vectorised access: which program each lane belongs to, for grid.watch (`flat_mask`: the active
    lanes as `_active_lanes` gives them, None when all are). Returns the allocation and the access by rows
    (each active lane's element index in the buffer) when every active lane lies in that one watched buffer."""
    _, launch = _active_launch()
    assert launch is not None
    groups, _ = launch.memory.locate(addresses)
    if len(groups) == 1 and groups[0][2].size == addresses.size:  # every lane in one buffer: by rows
        allocation, _, index = groups[0]
        batch = grid.active()
        assert batch is not None
        rows = np.shape(pointers)[0]
        row_pids = batch.pids if rows == batch.size else batch.pids[:1]
        counts = None if flat_mask is None else flat_mask.reshape(rows, -1).sum(axis=1)
        access = Access(index, row_pids, counts)
        grid.watch_rows(allocation, access, write)
        return allocation, access
    pids = grid.lane_programs(np.shape(pointers))
    if flat_mask is not None:
        pids = pids[flat_mask]
    grid.watch(groups, pids, write)
    return None


def _gathered(
    memory: Memory,
    located: tuple[Allocation, Access],
    addresses: Lanes,
    ptrs: Any,
    flat_mask: np.ndarray | None,
    other: Any,
) -> Any:
    """A vectorised load's result gathered by NumPy from the located element indices (the interpreter's C++
    load copies lane by lane, about 20x slower), or None where the lanes do not fit that (another item size
    than the buffer's, misaligned lanes, an `other` of another type). The same bytes either way: each active
    lane's item copied from its address as bits, the others from `other`."""
    module = sys.modules[MODULE]
    element = ptrs.get_element_ty()
    dtype = np.dtype(module._get_np_dtype(element))
    allocation, access = located
    if dtype.itemsize != allocation.itemsize or (flat_mask is not None and other.data.dtype != dtype):
        return None
    items = memory.items(allocation)
    if items is None or not addresses.aligned(allocation.buffer_start, allocation.itemsize):
        return None
    bits = items[access.index]
    if flat_mask is None:
        data = bits.view(dtype).reshape(np.shape(ptrs.data))
    else:
        data = np.array(np.broadcast_to(other.data, np.shape(ptrs.data)), dtype=dtype, order="C")
        data.reshape(-1).view(items.dtype)[flat_mask] = bits
    return module.TensorHandle(data, element)


def _scattered(
    memory: Memory, located: tuple[Allocation, Access], addresses: Lanes, value: np.ndarray,
    flat_mask: np.ndarray | None,
) -> bool:  # fmt: skip
    """A vectorised store written by NumPy at the located element indices (the interpreter's C++ store copies
    lane by lane, about 20x slower); False, with nothing written, where the lanes do not fit that. The
    interpreter writes the lanes in order, so a later lane to the same address wins: NumPy's scatter is the
    same only without repeated addresses, which the race watch has ruled out between programs (or the
    launch stopped) and the lanes of each program rising ruled out within one."""
    allocation, access = located
    if value.dtype.itemsize != allocation.itemsize or not _rising_by_rows(access):
        return False
    items = memory.items(allocation)
    if items is None or not addresses.aligned(allocation.buffer_start, allocation.itemsize):
        return False
    bits = value.reshape(-1).view(items.dtype)
    items[access.index] = bits if flat_mask is None else bits[flat_mask]
    return True


def _rising_by_rows(access: Access) -> bool:
    """Whether each row's active lanes address strictly rising elements (so no element twice in a row)."""
    index = access.index
    if index.size < 2:
        return True
    rising = index[1:] > index[:-1]
    rows = access.row_pids.size
    if access.counts is None:
        starts = np.arange(1, rows) * (index.size // rows)
    else:
        starts = np.cumsum(access.counts)[:-1]
        starts = starts[(starts > 0) & (starts < index.size)]
    rising[starts - 1] = True  # a row's first lane after the previous row's last: not compared
    return bool(rising.all())


def _masked_load(original: Any) -> Any:
    # The hints after `other` (Triton 3.6: cache_modifier, eviction_policy, is_volatile; later: cache_policy,
    # is_volatile) pass through untouched, whatever this Triton's interpreter names them.
    def load(self: Any, ptrs: Any, mask: Any, other: Any, *hints: Any, **named: Any) -> Any:
        call = _state["call"]
        batched = grid.active() is not None
        if batched:
            ptrs, mask, other = _batched_load_operands(ptrs, mask, other)
        checked = _checked("load", ptrs.data, mask.data, base_of(ptrs))
        located = None
        if checked is not None:
            addresses, flat_mask = checked
            if batched:
                located = _watch_batched(ptrs.data, flat_mask, addresses, write=False)
            else:
                _watch_read(addresses.addresses)
            if other is None and flat_mask is not None:  # some lane masked off (`_active_lanes`)
                other = _masked_fill(call, ptrs, batched)
            if located is not None and np.ndim(ptrs.data) > 0:
                gathered = _gathered(call.launch.memory, located, addresses, ptrs, flat_mask, other)
                if gathered is not None:
                    return gathered
        if lowp.is_lowp(np.dtype(sys.modules[MODULE]._get_np_dtype(ptrs.get_element_ty()))):
            return lowp_builder.plain_load(ptrs, mask, other)
        return original(self, ptrs, mask, other, *hints, **named)

    return load


def _masked_fill(call: _Call, ptrs: Any, batched: bool) -> Any:
    """What the masked-off lanes of a load without `other` read: 0, as NVIDIA's and AMD's lowering gives them
    (a register zeroed before the predicated load), or the poison block where the call asks for it."""
    module = sys.modules[MODULE]
    element = ptrs.get_element_ty()
    dtype = np.dtype(module._get_np_dtype(element))
    shape = np.shape(ptrs.data)
    site = call.note_undefined("")
    if not call.poisons(site or ""):
        return module.TensorHandle(np.zeros(shape, dtype=dtype), element)
    block = numerics.poison_block(
        getattr(element, "name", ""), dtype, shape[1:] if batched else shape, call.settings.seed
    )
    if batched:  # each program's lanes poisoned as the program alone would be
        block = np.ascontiguousarray(np.broadcast_to(block, shape))
    return module.TensorHandle(block, element)


def _masked_store(original: Any) -> Any:
    def store(self: Any, ptrs: Any, value: Any, mask: Any, *hints: Any, **named: Any) -> Any:
        batched = grid.active() is not None
        base = base_of(ptrs)
        if batched:
            module = sys.modules[MODULE]
            p, v, m = grid.broadcast(ptrs.data, value.data, mask.data)
            ptrs, value = module.TensorHandle(p, ptrs.dtype), module.TensorHandle(v, value.dtype)
            mask = module.TensorHandle(m, mask.dtype)
        checked = _checked("store", ptrs.data, mask.data, base)
        if checked is not None:
            addresses, flat_mask = checked
            if batched:
                located = _watch_batched(ptrs.data, flat_mask, addresses, write=True)
                if located is not None and _scattered(
                    _state["call"].launch.memory, located, addresses, value.data, flat_mask
                ):
                    return None
            else:
                _watch_write(addresses.addresses, ptrs.data, value.data, flat_mask)
        if lowp.is_lowp(value.data.dtype):
            return lowp_builder.plain_store(ptrs, value, mask)
        return original(self, ptrs, value, mask, *hints, **named)

    return store


def _atomic_rmw(original: Any) -> Any:
    def atomic_rmw(self: Any, op: Any, ptr: Any, val: Any, mask: Any, sem: Any, scope: Any) -> Any:
        call = _state["call"]
        flat_mask = None if mask is None else mask.data
        if _checked("atomic", ptr.data, flat_mask, base_of(ptr)) is not None:
            call.launch.synchronised = True
            call.atomics = call.atomics or int(np.prod(call.launch.grid)) > 1
        if lowp.is_lowp(val.data.dtype):
            made = lowp_builder.atomic_rmw(op, ptr, val, mask)
        else:
            made = original(self, op, ptr, val, mask, sem, scope)
        if call is not None and call.launch is not None and flat_mask is not None:
            made = _masked_atomic_lanes(call, made, flat_mask)
        return made

    return atomic_rmw


def _masked_atomic_lanes(call: _Call, made: Any, mask: np.ndarray) -> Any:
    """An atomic's result at its masked-off lanes: 0 (NVIDIA zeroes the register; AMD leaves it undefined), or
    poison where the call asks for it. Noted as a site like a load without `other`."""
    masked = ~np.broadcast_to(mask, np.shape(made.data))
    if not masked.any():
        return made
    site = call.note_undefined(" (an atomic's result)")
    if not call.poisons(site or ""):
        return made
    dtype = made.data.dtype
    poison = numerics.poison_block(
        getattr(made.dtype, "name", ""), dtype, np.shape(made.data), call.settings.seed
    )
    data = np.where(masked, poison, made.data).astype(dtype, copy=False)
    return sys.modules[MODULE].TensorHandle(data, made.dtype)


def _atomic_cas(original: Any) -> Any:
    def atomic_cas(self: Any, ptr: Any, cmp: Any, val: Any, sem: Any, scope: Any) -> Any:
        call = _state["call"]
        if _checked("atomic", ptr.data, None, base_of(ptr)) is not None:
            call.launch.synchronised = True
            call.atomics = call.atomics or int(np.prod(call.launch.grid)) > 1
        if lowp.is_lowp(val.data.dtype):
            return lowp_builder.atomic_cas(self, ptr, cmp, val, sem)
        return original(self, ptr, cmp, val, sem, scope)

    return atomic_cas


def _dot(original: Any) -> Any:
    def dot(self: Any, a: Any, b: Any, d: Any, input_precision: Any, max_num_imprecise_acc: Any) -> Any:
        call = _state["call"]
        module = sys.modules[MODULE]
        if call is None:
            return original(self, a, b, d, input_precision, max_num_imprecise_acc)
        if lowp.is_lowp(a.data.dtype) or lowp.is_lowp(b.data.dtype):
            # bf16 and fp8 products are exact in fp32; the GPU accumulates them in fp32 (`d`'s type).
            result = numerics.dot_fp32(a.data.astype(np.float32), b.data.astype(np.float32), d.data, "ieee")
            return module.TensorHandle(result, d.dtype.scalar)
        if a.data.dtype != np.float32 or b.data.dtype != np.float32:
            return original(self, a, b, d, input_precision, max_num_imprecise_acc)
        name = getattr(input_precision, "name", str(input_precision)).lower()
        precision = name if name in ("tf32", "tf32x3") else "ieee"
        if call.settings.ieee_dots:
            precision = "ieee"
        call.dot_precisions.add(precision)
        if precision != "ieee" or _state["dot_defaulted"]:
            _note_dot(call, precision)
        result = numerics.dot_fp32(a.data, b.data, d.data, precision)
        return module.TensorHandle(result, d.dtype.scalar)

    return dot


# Lines whose fp32 `tl.dot` left `input_precision` at its default, as the traced pass saw them (a replay runs
# no Python to tell): the note is made again when the tape replays the dot at that line.
_defaulted_sites: set[str] = set()


def _note_dot(call: _Call, precision: str) -> None:
    if len(call.dot_sites) >= MAX_POISON_SITES or not call.looked_up():
        return
    site = f"`{call.launch.kernel if call.launch else 'kernel'}` at {_site()}"
    if precision != "ieee":
        call.dot_sites.setdefault(site, precision)
    if _state["dot_defaulted"]:
        _defaulted_sites.add(site)
    if site in _defaulted_sites:
        call.dot_defaulted.setdefault(site)


def _gap(name: str, original: Any) -> Any:
    """The interpreter raises NotImplementedError for inline assembly and extern calls: recorded with the kernel
    and line, so that the case is reported as not judged (the interpreter's gap), not as the kernel raising."""

    def unsupported(self: Any, *args: Any, **kwargs: Any) -> Any:
        _note_gap(f"`{name}`")
        return original(self, *args, **kwargs)

    return unsupported


def _note_gap(what: str) -> None:
    call = _state["call"]
    if call is not None and len(call.gaps) < MAX_POISON_SITES:
        kernel = call.launch.kernel if call.launch is not None else "a kernel"
        call.gaps.add(f"{what} in `{kernel}` at {_site()}")


def _inline_asm_gap(original: Any) -> Any:
    return _gap("inline_asm_elementwise", original)


def _extern_gap(original: Any) -> Any:
    return _gap("extern_elementwise", original)


def _dot_scaled_gap(original: Any) -> Any:
    """Scaled dots (microscaling formats) compute in bf16 bit patterns in the interpreter: not judged."""

    def dot_scaled(self: Any, *args: Any, **kwargs: Any) -> Any:
        _note_gap("`dot_scaled`")
        raise NotImplementedError("dot_scaled is not computed as the GPU computes it here")

    return dot_scaled


def _modelled(wrap: Any) -> Any:
    """A lowp_builder replacement whose `Unmodelled` (fp8e4b15) is recorded as a gap, with the kernel and line."""

    def wrapped(original: Any) -> Any:
        inner = wrap(original)

        def method(*args: Any, **kwargs: Any) -> Any:
            try:
                return inner(*args, **kwargs)
            except lowp_builder.Unmodelled as exc:
                _note_gap(str(exc))
                raise NotImplementedError(f"{exc} are not computed as the GPU computes them here") from None

        return method

    return wrapped


def _fault_in(exc: BaseException) -> KernelFault | None:
    found = vectorised.find_cause(exc, KernelFault)
    return found if isinstance(found, KernelFault) else None


def _allocations(call_args: dict[str, Any], constexprs: list[str]) -> list[Allocation]:
    found: list[Allocation] = []

    def visit(name: str, value: Any) -> None:
        if isinstance(value, tuple):
            for i, item in enumerate(value):
                visit(f"{name}[{i}]", item)
            return
        base = getattr(value, "base", None)
        if type(value).__name__ == "TensorDescriptor" and base is not None:
            value = base
        if type(value).__name__ == "TensorWrapper":
            value = value.base
        if hasattr(value, "data_ptr") and hasattr(value, "untyped_storage"):
            found.append(Allocation.of(name, value))

    for name, value in call_args.items():
        if name not in constexprs:
            visit(name, value)
    return found


# A kernel's signature, read once (inspect's readings are a noticeable part of a small vectorised launch).
_argspec = functools.lru_cache(maxsize=1024)(inspect.getfullargspec)
_signature = functools.lru_cache(maxsize=1024)(inspect.signature)


def _run_grid(original: Any) -> Any:
    def run(self: Any, *args_dev: Any, **kwargs: Any) -> Any:
        call: _Call | None = _state["call"]
        if call is None:
            return original(self, *args_dev, **kwargs)
        module = sys.modules[MODULE]
        import triton

        argspec = _argspec(self.fn)
        kwargs = {k: v for k, v in kwargs.items() if k in argspec.args or k in argspec.kwonlyargs}
        args_hst, kwargs_hst = self._init_args_hst(args_dev, kwargs)
        for hook in self.pre_run_hooks:
            hook(*args_hst, **kwargs_hst)
        patch_lang = module.__dict__["_patch_lang"]
        setattr(module, "_patch_lang", _patched_once(patch_lang))  # noqa: B010  # the interpreter's global
        patch_scope = _LazyPatch(module, self.fn)  # a replayed launch runs no kernel Python: no patching
        try:
            bound = _signature(self.fn).bind(*args_hst, **kwargs_hst)
            bound.apply_defaults()
            call_args = dict(bound.arguments)
            memory = Memory(_allocations(call_args, self.constexprs))
            args = {
                name: arg if name in self.constexprs else module._implicit_cvt(arg)
                for name, arg in call_args.items()
            }
            for name, value in args.items():
                handle = getattr(value, "handle", None)
                if handle is not None and is_pointer(handle):
                    handle.attr[BASE] = name
            given = self.grid(args) if callable(self.grid) else self.grid
            assert len(given) <= 3, "grid must have at most 3 dimensions"
            dims = tuple(int(g) for g in given) + (1,) * (3 - len(given))
            module.interpreter_builder.set_grid_dim(*dims)
            launch = _Launch(getattr(self.fn, "__name__", "kernel"), dims, memory)  # type: ignore[arg-type]
            rng = np.random.default_rng([call.settings.seed & (2**64 - 1), call.settings.call, call.launches])
            call.launches += 1
            call.launch = launch
            gy, gz = dims[1], dims[2]
            order = rng.permutation(dims[0] * gy * gz)
            if not call.settings.seeded_order:
                order = np.arange(order.size)
            try:
                vectorise = call.settings.vectorise
                if vectorise is None:
                    vectorise = bool(_state["vectorise"])
                if vectorise and order.size > 1:
                    why = _vectorised(self, module, args, call, call_args, launch, order, patch_scope.apply)
                    if why is None:
                        order = order[:0]
                    else:
                        call.per_program[why] = call.per_program.get(why, 0) + 1
                if order.size:
                    patch_scope.apply()
                for pid in order.tolist():
                    program = (pid // (gy * gz), (pid // gz) % gy, pid % gz)
                    module.interpreter_builder.set_grid_idx(*program)
                    launch.program, launch.pid, launch.synchronised = program, pid, False
                    self.fn(**args)
            except Exception as exc:
                fault = _fault_in(exc)
                if fault is not None:
                    raise KernelFault(str(fault)) from None
                internal.raise_if_internal(call, self.fn, exc)
                if triton.knobs.compilation.front_end_debugging:
                    raise
                raise module.InterpreterError(repr(exc)) from exc
            finally:
                call.launch = None
        except (KernelFault, internal.LayerError, module.InterpreterError):
            raise
        except Exception as exc:  # before any program ran: the arguments, the grid
            internal.raise_if_internal(call, self.fn, exc)
            raise
        finally:
            patch_scope.restore()
            setattr(module, "_patch_lang", patch_lang)  # noqa: B010
        self._restore_args_dev(args_dev, args_hst, kwargs, kwargs_hst)

    return run


def _vectorised(
    executor: Any,
    module: Any,
    args: dict[str, Any],
    call: _Call,
    call_args: dict[str, Any],
    launch: _Launch,
    order: np.ndarray,
    patch_language: Any,
) -> str | None:
    """Run the launch with every program at once where it can (None), else say why it must run one program
    at a time. A launch of a kernel with a tape replays it (replay.py); else the pass runs the kernel's
    Python (`patch_language()` first) and is traced. A kernel that fell back for a reason of its code is not
    tried again; one that fell back for a reason of its data (an access out of bounds, programs touching each
    other's data, branches in too many groups) is tried again only after 4 launches, a number that doubles
    each time it falls back again, so that the stopped passes cost little next to the launches run per
    program directly."""
    kernel = (executor.fn, tuple(repr(call_args.get(n)) for n in executor.constexprs))
    static = _per_program_kernels.get(kernel)
    if static is not None:
        return static
    signature = (kernel, tuple(str(getattr(v, "type", "")) for v in args.values()))
    backoff = _fell_back.get(signature)
    if backoff is not None and backoff.skip > 0:
        backoff.skip -= 1
        return f"{REMEMBERED} ({backoff.why})"
    tracer = None
    if call.settings.replay:
        tried = time.perf_counter()
        groups = _replayed(module, args, call, launch, order, signature)
        if groups is None:
            spent.add(time.perf_counter() - tried)  # a replay abandoned (or no tape): paid for nothing
        if groups is not None:
            _fell_back.pop(signature, None)
            call.vectorised += 1
            call.replayed += 1
            if groups > 1:
                call.grouped[groups] = call.grouped.get(groups, 0) + 1
            return None
        key = _tape_key(signature, args)
        # A kernel whose traced pass fell back runs its next pass untraced (a fallback pays no tracing), and
        # is traced again after a pass that did not fall back.
        if key not in replay.untraceable and key not in replay.fell_back:
            tracer = replay.Tracer(_site)
    patch_language()
    replay._state["tracer"] = tracer
    passed = time.perf_counter()
    try:
        outcome = vectorised.run(executor, module, args, launch.grid, launch.memory, order, tracer)
    finally:
        replay._state["tracer"] = None
    if tracer is not None or outcome.why is not None:  # making a tape, or a pass abandoned for per program
        spent.add(time.perf_counter() - passed)
    if call.settings.replay:
        if tracer is not None:
            _keep_tape(key, tracer, outcome.why is None)
        if outcome.why is None:
            replay.fell_back.discard(key)
        elif tracer is not None:
            replay.fell_back.add(key)
    if outcome.why is None:
        _fell_back.pop(signature, None)
        call.vectorised += 1
        if outcome.groups > 1:
            call.grouped[outcome.groups] = call.grouped.get(outcome.groups, 0) + 1
    elif outcome.why.startswith(_STATIC_REASONS):
        _per_program_kernels[kernel] = outcome.why
    else:
        wait = FIRST_BACKOFF if backoff is None else min(2 * backoff.wait, MAX_BACKOFF)
        _fell_back[signature] = _Backoff(outcome.why, wait, wait)
    return outcome.why


def _tape_key(signature: Any, args: dict[str, Any]) -> Any:
    """What a tape is valid for: the kernel, its constexprs and argument types (`signature`), and the values of
    the arguments the interpreter passes as Python values (floats, None), which the tape holds as constants."""
    plain = tuple(repr(v) for v in args.values() if not hasattr(v, "handle"))
    return (signature, plain)


def _replayed(
    module: Any, args: dict[str, Any], call: _Call, launch: _Launch, order: np.ndarray, signature: Any
) -> int | None:
    """The number of groups the launch ran in by replaying tapes of the kernel, or None when it did not (then
    memory and what the call has noted are as before it)."""
    kept = replay.tapes.get(_tape_key(signature, args))
    if not kept:
        return None

    def noted() -> Any:
        then = (
            call.site_lookups, dict(call.undefined), set(call.dot_precisions), dict(call.notes),
            dict(call.dot_sites), dict(call.dot_defaulted), call.atomics, set(call.gaps),
        )  # fmt: skip

        def put_back() -> None:
            (
                call.site_lookups, call.undefined, call.dot_precisions, call.notes, call.dot_sites,
                call.dot_defaulted, call.atomics, call.gaps,
            ) = then  # fmt: skip

        return put_back

    put_back = noted()
    why, groups = vectorised.replayed(kept, module, args, launch.grid, launch.memory, order, noted)
    if why is None:
        replay.counts["replayed"] += 1
        return groups
    replay.counts["abandoned"] += 1
    put_back()
    return None


def _keep_tape(key: Any, tracer: replay.Tracer, vectorised_ok: bool) -> None:
    """The traced pass's tape, kept for later launches (up to `replay.TAPES_PER_KEY` per key, for the loops'
    trip counts and branches seen); or why the kernel cannot be traced."""
    if not vectorised_ok:
        return  # the launch fell back (the pass stopped): nothing to learn about the kernel's code
    if tracer.broken:
        replay.untraceable[key] = tracer.broken
        replay.tapes.pop(key, None)
        return
    replay.counts["traced"] += 1
    if len(replay.tapes) >= replay.MAX_TAPES and key not in replay.tapes:
        replay.tapes.pop(next(iter(replay.tapes)))
    kept = replay.tapes.setdefault(key, [])
    for tape in tracer.harvested:
        kept.insert(0, tape)
    del kept[replay.TAPES_PER_KEY :]


class _LazyPatch:
    """The interpreter's language patches for one launch, made when the kernel's Python is first to run."""

    def __init__(self, module: Any, fn: Any) -> None:
        self.module, self.fn, self.scope = module, fn, None

    def apply(self) -> None:
        if self.scope is None:
            self.scope = self.module.__dict__["_patch_lang"](self.fn)

    def restore(self) -> None:
        if self.scope is not None:
            self.scope.restore()


class _NothingToRestore:
    def restore(self) -> None:
        pass


def _patched_once(patch_lang: Any) -> Any:
    """The interpreter's `_patch_lang` for the duration of one launch, doing its work once per set of language
    modules. The interpreter patches the language again at every call of a jit helper (`tl.max`, `tl.sum`, the
    kernel's own), in every program, and never restores those patches: each is a scan of every member of
    `triton.language` (most of a small program's time) that finds them patched already. Patching the same
    modules again within the launch sets the same wrappers, so skipping it changes nothing but the time."""
    done: set[tuple[int, ...]] = set()
    namespaces: set[int] = set()

    def once(fn: Any) -> Any:
        import triton.language as tl

        langs = _lang_key(fn)
        target = (
            fn if langs else imported.with_tl()
        )  # builtins imported by name only: the language is patched anyway
        langs = langs or _lang_key(target)
        scope: Any = None
        if langs not in done:
            done.add(langs)
            scope = patch_lang(target)
            if callable(getattr(scope, "set_attr", None)):
                scope.set_attr(tl.tensor, "__index__", _scalar_index)  # undone with the interpreter's patches
                for lang in (tl, tl.core):
                    if getattr(lang, "dot", None) is not None:
                        scope.set_attr(lang, "dot", _dot_noting(lang.dot))
        namespace = getattr(fn, "__globals__", None)
        if isinstance(namespace, dict) and id(namespace) not in namespaces:
            namespaces.add(id(namespace))
            scope = imported.patch_imported_builtins(namespace, scope)
        return scope if scope is not None else _NothingToRestore()

    return once


def _dot_noting(patched: Any) -> Any:
    """`tl.dot` as the interpreter patched it, telling `_dot` whether the kernel left `input_precision` (and the
    deprecated `allow_tf32`) unset: fp32 inputs then take the backend's default (TF32 on NVIDIA)."""
    if getattr(patched, "_gpuemu_dot", False):
        return patched

    def dot(*args: Any, **kwargs: Any) -> Any:
        asked = [*args[3:5], kwargs.get("input_precision"), kwargs.get("allow_tf32")]
        before = _state["dot_defaulted"]
        _state["dot_defaulted"] = all(getattr(a, "value", a) is None for a in asked)
        try:
            return patched(*args, **kwargs)
        finally:
            _state["dot_defaulted"] = before

    dot._gpuemu_dot = True  # type: ignore[attr-defined]
    return dot


def _scalar_index(self: Any) -> int:
    """A scalar tensor as a loop bound or index, as Triton 3.7 and later read it. Triton 3.6's interpreter
    calls `int()` on the one-element array that holds a scalar argument, which NumPy 2.5 refuses, so every
    `range(0, K, BK)` over a runtime K raised there; the compiled kernel loops."""
    return int(np.asarray(self.handle.data).squeeze())


# What the interpreter's `_patch_lang` sets, per set of language modules it patches: (owner, name, value).
_lang_patches: dict[tuple[int, ...], list[tuple[Any, str, Any]]] = {}


_ABSENT = object()


def _lang_key(fn: Any) -> tuple[int, ...]:
    """Which language modules `_patch_lang(fn)` patches: those of `tl` and `tl.core` in the function's globals."""
    import triton.language as tl

    return tuple(sorted({id(v) for v in fn.__globals__.values() if v is tl or v is tl.core}))


def _replayed_patch_lang(original: Any) -> Any:
    """The interpreter's `_patch_lang(fn)` without its scan of every member of `triton.language` (via
    `inspect.getmembers`, most of a small launch's own time): the first call for a set of language modules
    runs it and records what it set; later calls set the same values through a scope of the interpreter's
    own kind, so that restoring it puts back what was there. The values are the interpreter's stateless
    wrappers (builtins bound to its semantic, `range`, `to_ir`, reductions), the same whenever made."""
    module = sys.modules[MODULE]

    def patch_lang(fn: Any) -> Any:
        key = _lang_key(fn)
        recorded = _lang_patches.get(key)
        if recorded is None:
            scope = original(fn)
            changes = getattr(scope, "_changes", None)
            if isinstance(changes, list):
                made = [(obj, name, vars(obj).get(name, _ABSENT)) for obj, name, _ in changes]
                if all(
                    value is not _ABSENT for _, _, value in made
                ):  # else: the interpreter's way, every time
                    _lang_patches[key] = made
            return scope
        scope = module._LangPatchScope()
        missing = module.__dict__.get("_MISSING", _ABSENT)
        if missing is _ABSENT:
            for obj, name, value in recorded:
                scope.set_attr(obj, name, value)
            return scope
        # What `set_attr` does, inline (a method call per attribute was most of the replay's time); the
        # scope's own `restore` puts them back.
        changes = []
        for obj, name, value in recorded:
            changes.append((obj, name, getattr(obj, name, missing)))
            setattr(obj, name, value)
        scope._changes = changes
        return scope

    return patch_lang


def _boolop_note() -> None:
    tracer = replay._state["tracer"]
    if tracer is not None:  # the note is made by the kernel's Python, which a replay does not run
        tracer.stop("Python `and`/`or` on a block")
    call = _state["call"]
    if call is not None and len(call.notes) < MAX_POISON_SITES and call.looked_up():
        call.notes.setdefault(
            f"Python `and`/`or` on tensors at {_site()}: evaluated elementwise as the GPU compiler does "
            "(the interpreter would keep one operand); Triton deprecates it, use `&` / `|`"
        )


# What the layer relies on in triton/runtime/interpreter.py (Triton 3.x); another layout is not patched.
_NEEDED = {
    "": ("GridExecutor", "InterpreterBuilder", "TensorHandle", "InterpreterError", "interpreter_builder",
         "_patch_lang", "_implicit_cvt", "_get_np_dtype", "_interpreter"),
    "GridExecutor": ("__call__", "_init_args_hst", "_restore_args_dev"),
    "InterpreterBuilder": ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas",
                           "create_dot", "set_grid_idx", "set_grid_dim"),
}  # fmt: skip


def unsupported(module: Any) -> str:
    """Why the layer cannot patch this interpreter ("" when it can)."""
    for owner_name, names in _NEEDED.items():
        owner = getattr(module, owner_name) if owner_name else module
        missing = [n for n in names if not hasattr(owner, n)]
        if missing:
            where = f"{owner_name}." if owner_name else ""
            return (
                f"this Triton's interpreter has no {', '.join(where + m for m in missing)}: its kernels ran "
                "in the plain interpreter, without the GPU-faithful checks"
            )
    return ""


def _patch(module: Any) -> None:
    call = _state["call"]
    reason = unsupported(module)
    if reason:
        if call is not None:
            call.unsupported = reason
        return
    executor = module.GridExecutor
    builder = module.InterpreterBuilder
    replaced: list[tuple[Any, str, Callable[[Any], Any]]] = [
        (executor, "__call__", _run_grid),
        (builder, "create_masked_load", _masked_load),
        (builder, "create_masked_store", _masked_store),
        (builder, "create_atomic_rmw", _atomic_rmw),
        (builder, "create_atomic_cas", _atomic_cas),
        (builder, "create_dot", _dot),
    ]
    replaced.extend((builder, name, derived) for name in PROVENANCE if name in builder.__dict__)
    if "_patch_lang" in module.__dict__ and "_LangPatchScope" in module.__dict__:
        replaced.append((module, "_patch_lang", _replayed_patch_lang))
    replaced.extend((owner, name, _modelled(wrap)) for owner, name, wrap in lowp_builder.replaced(module))
    gaps = {
        "create_inline_asm": _inline_asm_gap,
        "create_extern_elementwise": _extern_gap,
        "create_dot_scaled": _dot_scaled_gap,
    }
    replaced.extend((builder, name, wrap) for name, wrap in gaps.items() if name in builder.__dict__)
    replaced.extend(autotune.replaced(_autotune_draw))
    for owner, name, wrap in replaced:
        original = owner.__dict__[name]
        wrapper = wrap(original)
        setattr(owner, name, wrapper)
        _state["restore"].append((owner, name, original))
        if call is not None:
            call.installed.append((owner, name, wrapper))
    if call is not None:
        call.patches += 1


def _autotune_draw() -> int:
    """Which config an autotuned launch runs: from the case seed and the launch's place in the call."""
    call = _state["call"]
    return 0 if call is None else (call.settings.seed + 7919 * call.launches) & 0x7FFFFFFF


def _unpatch() -> None:
    for owner, name, original in reversed(_state["restore"]):
        setattr(owner, name, original)
    _state["restore"] = []


def on_import(module: Any) -> None:
    """The interpreter module was just imported: fix its `and`/`or`, and patch it if a call is running."""
    boolops.install(module)
    if _boolop_note not in boolops.on_block_operands:
        boolops.on_block_operands.append(_boolop_note)
    if _state["call"] is not None and not _state["restore"]:
        _patch(module)


@contextmanager
def intercepted(settings: CallSettings) -> Iterator[_Call]:
    """The layer around one op call; the yielded object's `report()` says what it saw."""
    call = _Call(settings)
    if not settings.sanitize or _state["call"] is not None:
        yield call
        return
    _state["call"] = call
    # The data-dependent fallback memory is per call: a case's launch counts (in the results) must follow from
    # the case alone, not from which cases this worker ran before.
    _fell_back.clear()
    module = sys.modules.get(MODULE)
    if module is not None:
        on_import(module)
    try:
        yield call
    finally:
        tampered = _tampering(call)
        if tampered:
            call.findings.append((TAMPERED, tampered))
            guard.restore()
        _state["call"] = None
        _unpatch()


def _tampering(call: _Call) -> str:
    """Why the checks of this call may not all have run as the layer installed them ("" when they did): the op
    replaced the layer's record of the call, one of its hooks on the interpreter, or its code (guard.py)."""
    why = ""
    if _state.get("call") is not call:
        why = "its record of the running call was replaced"
    elif call.patches > 1:
        why = "it was installed on the interpreter more than once during the call"
    else:
        moved = [
            f"{getattr(o, '__name__', o)}.{n}" for o, n, w in call.installed if o.__dict__.get(n) is not w
        ]
        changed = moved or guard.changed()
        if changed:
            why = f"{', '.join(changed[:5])} changed during the call"
    if not why:
        return ""
    return (
        f"the op changed gpuemu-ci's Triton layer while it ran ({why}): the bounds, race and masked-lane "
        "checks it was promised may not have run, so the case cannot pass"
    )
