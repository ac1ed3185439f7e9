"""Running one launch with every program at once (grid.py), or saying why it must run one program at a time:
the kernel's arguments are lifted to a program axis of 1, the builder and language are switched to their
batched versions for the pass (and back after it), the grid runs in chunks in the launch's order, and a pass
that stops restores the arguments' memory so that the per-program run starts from the same bytes.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from gpuemu_ci.triton_cpu import grid, provenance
from gpuemu_ci.triton_cpu.memory import Memory


def run(
    executor: Any,
    module: Any,
    args: dict[str, Any],
    dims: tuple[int, int, int],
    memory: Memory,
    order: np.ndarray,
) -> str | None:
    """Run the launch with every program at once (grid.py), in chunks; None when done, else why it must run
    one program at a time (its arguments' memory is then as it was before)."""
    import triton.language as tl

    batched: dict[str, Any] = {}
    for name, value in args.items():
        if isinstance(value, tl.tensor):
            handle = module.TensorHandle(value.handle.data[None], value.handle.dtype, dict(value.handle.attr))
            batched[name] = tl.tensor(handle, value.type)
        elif isinstance(value, (tuple, list)) or type(value).__name__ == "tensor_descriptor":
            return "tuple or descriptor arguments"
        else:
            batched[name] = value
    saved = _snapshot(memory)
    builder = module.InterpreterBuilder
    restore: list[tuple[Any, str, Any]] = []
    patch_lang = module._patch_lang

    def repatched(fn: Any) -> Any:
        # A jit helper's call (tl.max, tl.sum, the kernel's own) re-patches the language: put ours back on top.
        scope = patch_lang(fn)
        for owner, name, value in grid.language_patches():
            setattr(owner, name, value)
        return scope

    for owner, name, value in [
        *(
            (builder, n, provenance.derived(f) if n in provenance.PROVENANCE else f)
            for n, f in grid.builder_methods(module).items()
        ),
        *grid.language_patches(),
        (module, "_patch_lang", repatched),
    ]:
        restore.append((owner, name, owner.__dict__.get(name, _ABSENT)))
        setattr(owner, name, value)
    readers: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    writers: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    _, gy, gz = dims
    why: str | None = None
    try:
        for start in range(0, order.size, grid.CHUNK_PROGRAMS):
            pids = order[start : start + grid.CHUNK_PROGRAMS].astype(np.int64)
            coords = np.stack([pids // (gy * gz), (pids // gz) % gy, pids % gz], axis=1).astype(np.int32)
            grid._state["batch"] = grid.Batch(coords, pids, readers, writers)
            executor.fn(**batched)
    except Exception as exc:
        stop = find_cause(exc, grid.NotVectorisable)
        why = str(stop) if stop is not None else f"the vectorised pass raised {type(exc).__name__}"
    finally:
        grid._state["batch"] = None
        for owner, name, value in reversed(restore):
            if value is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, value)
    if why is not None:
        for view, copy in saved:
            view[...] = copy
    return why


_ABSENT = object()


def _snapshot(memory: Memory) -> list[tuple[np.ndarray, np.ndarray]]:
    """The bytes of every buffer the launch's arguments live in: (a view of the memory, a copy)."""
    saved = []
    seen: set[int] = set()
    for a in memory.allocations:
        size = a.buffer_end - a.buffer_start
        if a.buffer_start in seen or size <= 0:
            continue
        seen.add(a.buffer_start)
        view = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(a.buffer_start))
        saved.append((view, view.copy()))
    return saved


def find_cause(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
