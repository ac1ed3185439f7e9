"""Every active lane of a load, store or atomic checked before it happens: bounds, and races between programs.

An access outside the kernel's tensor arguments stops the kernel with `KernelFault` and is recorded as an
`out_of_bounds` finding (kernel, program, argument, element offset, how far out, source line). Each launch keeps
a shadow of which program wrote each element: a program that reads what another program of the same launch
wrote (without an atomic first), or overwrites it with a different value, is a `race` finding. A vectorised
pass (grid.py) records who touched what by program instead, and moves the data itself where the lanes allow
(`gathered`, `scattered`).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from gpuemu_ci.triton_cpu import grid, sites
from gpuemu_ci.triton_cpu.boundary import Handle
from gpuemu_ci.triton_cpu.call import CallRecord, KernelFault, Launch
from gpuemu_ci.triton_cpu.memory import Allocation, Lanes, Memory, Violation
from gpuemu_ci.triton_cpu.report import OUT_OF_BOUNDS, RACE
from gpuemu_ci.triton_cpu.touches import Access

MODULE = "triton.runtime.interpreter"


def active_lanes(pointers: np.ndarray, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """(addresses of the active lanes, flat, and the flat mask or None when every lane is active)."""
    flat = np.ravel(pointers)
    if mask is None:
        return flat, None
    m = np.ravel(mask if np.shape(mask) == np.shape(pointers) else np.broadcast_to(mask, np.shape(pointers)))
    if m.all():
        return flat, None
    return flat[m], m


def _out_of_bounds(call: CallRecord, launch: Launch, access: str, violation: Violation, active: int) -> None:
    message = (
        f"{access} out of bounds in kernel `{launch.kernel}`, program {launch.program} of grid {launch.grid}, "
        f"at {sites.site(launch)}: {violation.where}; {violation.lanes_out} of {active} active lanes out of "
        "bounds"
    )
    call.findings.append((OUT_OF_BOUNDS, message))
    raise KernelFault(message)


def checked(
    call: CallRecord,
    launch: Launch,
    access: str,
    pointers: np.ndarray,
    mask: np.ndarray | None,
    base: str | None = None,
) -> tuple[Lanes, np.ndarray | None]:
    """Bounds-check an access's active lanes (against `base`, the argument the pointers come from, when
    known); returns their addresses and the flat mask as `active_lanes` does, so that the race checks need
    not flatten the mask again."""
    flat, flat_mask = active_lanes(pointers, mask)
    addresses = Lanes(flat)
    violation = launch.memory.check(addresses, base)
    if violation is not None:
        if launch.batch is not None:  # reported by the per-program run, in its order
            raise grid.NotVectorisable("an access out of bounds")
        _out_of_bounds(call, launch, access, violation, addresses.size)
    return addresses, flat_mask


def _race(
    call: CallRecord, launch: Launch, allocation: Allocation, other: int, element: int, what: str
) -> None:
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
            f"wrote in the same launch, at {sites.site(launch)}. On a GPU the programs of a launch run "
            "concurrently and in any order: use an atomic, or a separate launch",
        )
    )


def watch_read(call: CallRecord, launch: Launch, addresses: np.ndarray) -> None:
    """A read by the running program: a race if another program of the launch wrote an element it reads."""
    if launch.synchronised or launch.race_found or addresses.size == 0:
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


def watch_write(
    call: CallRecord,
    launch: Launch,
    addresses: np.ndarray,
    pointers: np.ndarray,
    values: np.ndarray,
    mask: np.ndarray | None,
) -> None:
    """A write by the running program: a race if it changes an element another program of the launch wrote;
    the elements are then marked as the running program's."""
    if addresses.size == 0:
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


def watch_batched(
    launch: Launch, pointers: np.ndarray, flat_mask: np.ndarray | None, addresses: Lanes, write: bool
) -> tuple[Allocation, Access] | None:
    """A vectorised access: which program each lane belongs to, for grid.watch (`flat_mask`: the active
    lanes as `active_lanes` gives them, None when all are). Returns the allocation and the access by rows
    (each active lane's element index in the buffer) when every active lane lies in that one watched buffer."""
    batch = launch.batch
    assert batch is not None
    groups, _ = launch.memory.locate(addresses)
    if len(groups) == 1 and groups[0][2].size == addresses.size:  # every lane in one buffer: by rows
        allocation, _, index = groups[0]
        rows = np.shape(pointers)[0]
        row_pids = batch.pids if rows == batch.size else batch.pids[:1]
        counts = None if flat_mask is None else flat_mask.reshape(rows, -1).sum(axis=1)
        access = Access(index, row_pids, counts)
        grid.watch_rows(batch, allocation, access, write)
        return allocation, access
    pids = grid.lane_programs(batch, np.shape(pointers))
    if flat_mask is not None:
        pids = pids[flat_mask]
    grid.watch(batch, groups, pids, write)
    return None


def gathered(
    memory: Memory,
    located: tuple[Allocation, Access],
    addresses: Lanes,
    ptrs: Handle,
    flat_mask: np.ndarray | None,
    other: Handle | None,
) -> Any:
    """A vectorised load's result gathered by NumPy from the located element indices (the interpreter's C++
    load copies lane by lane, about 20x slower), or None where the lanes do not fit that (another item size
    than the buffer's, misaligned lanes, an `other` of another type). The same bytes either way: each active
    lane's item copied from its address as bits, the others from `other`."""
    module = sys.modules[MODULE]
    element = ptrs.get_element_ty()
    dtype = np.dtype(module._get_np_dtype(element))
    allocation, access = located
    if dtype.itemsize != allocation.itemsize:
        return None
    if flat_mask is not None and (other is None or other.data.dtype != dtype):  # `other` fills masked lanes
        return None
    items = memory.items(allocation)
    if items is None or not addresses.aligned(allocation.buffer_start, allocation.itemsize):
        return None
    bits = items[access.index]
    if flat_mask is None:
        data = bits.view(dtype).reshape(np.shape(ptrs.data))
    else:
        assert other is not None  # returned above otherwise
        data = np.array(np.broadcast_to(other.data, np.shape(ptrs.data)), dtype=dtype, order="C")
        data.reshape(-1).view(items.dtype)[flat_mask] = bits
    return module.TensorHandle(data, element)


def scattered(
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
