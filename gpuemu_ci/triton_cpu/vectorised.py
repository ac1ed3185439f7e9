"""Running one launch with every program at once (grid.py), or saying why it must run one program at a time:
the kernel's arguments are lifted to a program axis of 1, the builder and language are switched to their
batched versions for the pass (and back after it), the grid runs in chunks in the launch's order, and a pass
that stops restores the arguments' memory so that the per-program run starts from the same bytes.
"""

from __future__ import annotations

import ctypes
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from gpuemu_ci.triton_cpu import grid, provenance, replay
from gpuemu_ci.triton_cpu.boundary import Patch
from gpuemu_ci.triton_cpu.call import Launch
from gpuemu_ci.triton_cpu.memory import Memory
from gpuemu_ci.triton_cpu.tape import Tape, agrees
from gpuemu_ci.triton_cpu.touches import Touches
from gpuemu_ci.triton_cpu.tracer import Tracer

# A launch whose programs disagree on branches is run in at most this many groups of programs that agree;
# past it, one program at a time (groups of a program or two gain nothing over the per-program run).
MAX_GROUPS = 32
Shadows = dict[int, Touches]


@dataclass(frozen=True)
class Outcome:
    """How a vectorised try of a launch ended."""

    why: str | None  # None: every program ran vectorised; else why the launch must run one program at a time
    groups: int = 1  # the programs ran in this many groups that agree on every divergent branch


def run(
    executor: Any,
    module: ModuleType,
    args: dict[str, Any],
    launch: Launch,
    order: np.ndarray,
    tracer: Tracer | None = None,
) -> Outcome:
    """Run the launch with every program at once (grid.py), in chunks, and where the programs diverge (a Python
    `if`/`while`/`range` on a value that differs between them) in groups of programs that agree: the diverging
    batch's memory is put back as it was before it and its programs re-run group by group, each group in the
    launch's order. Programs that do not touch each other's data (watched across the whole launch, every group
    included: else the launch falls back) give the same bytes in any grouping. When the launch must run one
    program at a time, its arguments' memory is as it was before it. With a `tracer`, the first chunk's pass is
    recorded (tracer.py). The launch's `batch` is the chunk running meanwhile."""
    memory = launch.memory
    batched = lifted(module, args)
    if batched is None:
        return Outcome("tuple or descriptor arguments")
    saved = _snapshot(memory)
    if tracer is not None:
        for name, value in batched.items():
            if hasattr(value, "handle"):
                tracer.add_input(name, value.handle)
    restore = _install(module, tracer)
    if tracer is not None:
        tracer.patched(executor.fn)
    readers: Shadows = {}
    writers: Shadows = {}
    _, gy, gz = launch.grid
    why: str | None = None
    groups = 1
    pending = deque(
        order[start : start + grid.CHUNK_PROGRAMS] for start in range(0, order.size, grid.CHUNK_PROGRAMS)
    )
    checkpoint: tuple[list[tuple[np.ndarray, np.ndarray]], Shadows, Shadows] = (saved, {}, {})
    fresh = True  # memory and shadows are as the checkpoint holds them
    try:
        while pending:
            pids = pending.popleft().astype(np.int64)
            if not fresh:
                checkpoint = (_snapshot(memory), _copied(readers), _copied(writers))
            coords = np.stack([pids // (gy * gz), (pids // gz) % gy, pids % gz], axis=1).astype(np.int32)
            launch.batch = grid.Batch(coords, pids, readers, writers)
            try:
                executor.fn(**batched)
                fresh = False
                if tracer is not None:
                    tracer.harvest()
            except Exception as exc:
                too_large = find_cause(exc, grid.TooLarge)
                if isinstance(too_large, grid.TooLarge) and too_large.fits < pids.size:
                    _put_back(checkpoint, readers, writers)
                    fresh = True
                    if tracer is not None:
                        tracer.reset()
                    pending = _pieces([pids, *pending], too_large.fits)
                    continue
                split = _groups(find_cause(exc, grid.Divergent), pids)
                if split is None:
                    raise
                if groups + len(split) - 1 > MAX_GROUPS:
                    why = f"{find_cause(exc, grid.Divergent)} in more than {MAX_GROUPS} groups of programs"
                    break
                _put_back(checkpoint, readers, writers)
                fresh = True
                if tracer is not None:
                    tracer.reset()  # each group's run is a tape of its own
                groups += len(split) - 1
                pending.extendleft(reversed(split))
    except Exception as exc:
        stop = find_cause(exc, grid.NotVectorisable)
        why = str(stop) if stop is not None else f"the vectorised pass raised {type(exc).__name__}"
    finally:
        launch.batch = None
        _uninstall(restore)
        if tracer is not None:
            tracer.unpatch()
    if why is not None:
        for view, copy in saved:
            view[...] = copy
        return Outcome(why)
    return Outcome(None, groups)


def lifted(module: ModuleType, args: dict[str, Any]) -> dict[str, Any] | None:
    """The kernel's arguments with a program axis of 1 (None: tuple or descriptor arguments, not lifted)."""
    import triton.language as tl

    batched: dict[str, Any] = {}
    for name, value in args.items():
        if isinstance(value, tl.tensor):
            handle = module.TensorHandle(value.handle.data[None], value.handle.dtype, dict(value.handle.attr))
            batched[name] = tl.tensor(handle, value.type)
        elif isinstance(value, (tuple, list)) or type(value).__name__ == "tensor_descriptor":
            return None
        else:
            batched[name] = value
    return batched


def replayed(
    tapes: list[Tape], module: ModuleType, args: dict[str, Any], launch: Launch,
    order: np.ndarray, noted: Callable[[], Callable[[], None]],
) -> tuple[str | None, int]:  # fmt: skip
    """Run the launch by replaying the kernel's tapes (replay.py) on its arguments, under the same batched
    builder and checks as the pass: chunk by chunk in the launch's order, each batch with the first tape
    whose guards hold (`tapes` is reordered, the one replayed first), and where a guard's value differs
    between the programs, in the groups the pass would make, as it makes them. (None, groups) when it ran;
    else (why it was abandoned, _) with memory as it was before the launch. `noted()` saves what the call has
    noted and returns what puts it back, after a tape that was abandoned."""
    batched = lifted(module, args)
    if batched is None:
        return "tuple or descriptor arguments", 1
    inputs = {name: value.handle for name, value in batched.items() if hasattr(value, "handle")}
    memory = launch.memory
    saved: list[list[tuple[np.ndarray, np.ndarray]]] = []  # the launch's memory, before its first store

    def before_store(last: bool) -> None:
        # A launch of one batch whose only store is its tape's last step cannot be abandoned after it: nothing
        # to save (the store's own checks run before it writes).
        if not saved and not (last and single):
            saved.append(_snapshot(memory))

    restore = _install(module, None, language=False)
    readers: Shadows = {}
    writers: Shadows = {}
    _, gy, gz = launch.grid
    builder = module.interpreter_builder
    groups = 1
    # Batches to run, each with what its programs were split on (a guard and their outcome there), if any.
    pending: deque[tuple[np.ndarray, tuple[int, str, Any] | None]] = deque(
        (order[start : start + grid.CHUNK_PROGRAMS], None)
        for start in range(0, order.size, grid.CHUNK_PROGRAMS)
    )
    fresh = True  # no batch has completed: a batch starts from the launch's own start
    single = len(pending) == 1  # one batch so far (a chunk, no groups)
    try:
        while pending:
            batch_pids, hint = pending.popleft()
            pids = batch_pids.astype(np.int64)
            checkpoint = None if fresh else (_snapshot(memory), _copied(readers), _copied(writers))
            coords = np.stack([pids // (gy * gz), (pids // gz) % gy, pids % gz], axis=1).astype(np.int32)
            launch.batch = grid.Batch(coords, pids, readers, writers)
            # A group split at a guard tries first the tapes that took its way there (then the others).
            for tape in sorted(tapes, key=lambda t: not agrees(t, hint)) if hint else list(tapes):
                put_back_noted = noted()
                try:
                    replay.replay_steps(tape, builder, inputs, before_store, launch)
                except grid.TooLarge as exc:
                    if exc.fits >= pids.size:
                        raise
                    _rewind(checkpoint, saved, readers, writers)
                    pending = deque(
                        (piece, batch_hint)
                        for batch, batch_hint in [(pids, hint), *pending]
                        for piece in _pieces([batch], exc.fits)
                    )
                    single = False
                    break
                except replay.Diverged as exc:
                    split = _groups(exc, pids)
                    if split is None or groups + len(split) - 1 > MAX_GROUPS:
                        raise
                    _rewind(checkpoint, saved, readers, writers)
                    groups += len(split) - 1
                    pending.extendleft(reversed([(group, _hint(exc, pids, group)) for group in split]))
                    single = False
                    break
                except replay.Abandon:
                    put_back_noted()
                    _rewind(checkpoint, saved, readers, writers)
                    continue
                fresh = False
                tapes.remove(tape)
                tapes.insert(0, tape)
                break
            else:
                raise replay.Abandon("no tape's guards hold")
    except Exception as exc:
        for view, copy in saved[0] if saved else ():
            view[...] = copy
        return str(exc) or type(exc).__name__, groups
    finally:
        launch.batch = None
        _uninstall(restore)
    return None, groups


def _hint(divergence: replay.Diverged, pids: np.ndarray, group: np.ndarray) -> tuple[int, str, Any] | None:
    """(step, kind, outcome) of the guard the batch split at, as the group's programs see it."""
    if divergence.guard is None:
        return None
    step, kind = divergence.guard
    value = divergence.keys[int(np.flatnonzero(pids == group[0])[0])]
    return step, kind, bool(value) if kind == "bool" else int(value)


def _rewind(
    checkpoint: tuple[list[tuple[np.ndarray, np.ndarray]], Shadows, Shadows] | None,
    saved: list[list[tuple[np.ndarray, np.ndarray]]],
    readers: Shadows,
    writers: Shadows,
) -> None:
    """Memory and shadows as they were before the batch (None: the batch started the launch)."""
    if checkpoint is not None:
        _put_back(checkpoint, readers, writers)
        return
    for view, copy in saved[0] if saved else ():
        view[...] = copy
    readers.clear()
    writers.clear()


def _pieces(batches: list[np.ndarray], fits: int) -> deque[np.ndarray]:
    """The batches still to run, each cut into pieces of at most `fits` programs, in order."""
    return deque(batch[start : start + fits] for batch in batches for start in range(0, batch.size, fits))


def _groups(divergence: BaseException | None, pids: np.ndarray) -> list[np.ndarray] | None:
    """The batch's programs in groups that agree on the divergent value (each in the batch's order, groups in
    the order of their first program); None when there is nothing to split on."""
    keys = getattr(divergence, "keys", None)  # grid.Divergent, or replay.Diverged
    if not isinstance(keys, np.ndarray) or keys.size != pids.size:
        return None
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    if first.size < 2:
        return None
    return [pids[inverse.ravel() == g] for g in np.argsort(first, kind="stable")]


def _copied(shadows: Shadows) -> Shadows:
    return {key: touches.copy() for key, touches in shadows.items()}


def _put_back(
    checkpoint: tuple[list[tuple[np.ndarray, np.ndarray]], Shadows, Shadows],
    readers: Shadows,
    writers: Shadows,
) -> None:
    """Memory and the who-touched-what shadows as they were before the diverging batch."""
    saved, readers_then, writers_then = checkpoint
    for view, copy in saved:
        view[...] = copy
    readers.clear()
    readers.update(_copied(readers_then))
    writers.clear()
    writers.update(_copied(writers_then))


def _install(module: ModuleType, tracer: Tracer | None, language: bool = True) -> list[Patch]:
    """The batched builder (and, for a pass, language) for the launch; with a tracer, recorded; returns what to
    put back."""
    builder = module.InterpreterBuilder
    restore: list[Patch] = []

    def install(owner: object, name: str, value: Any) -> None:
        restore.append((owner, name, owner.__dict__.get(name, _ABSENT)))
        setattr(owner, name, value)

    owned = builder.__dict__
    for n, f in _batched_builder(module).items():  # inline: a replayed launch's largest fixed cost of its own
        restore.append((builder, n, owned.get(n, _ABSENT)))
        setattr(builder, n, f)
    if not language:
        return restore
    patches = grid.language_patches()
    if tracer is not None:
        for owner, name, value in tracer.builder_methods(builder):
            install(owner, name, value)
        for owner, name, value in tracer.watch_handles(module):
            install(owner, name, value)
        patches = tracer.language(patches)
    patch_lang = module._patch_lang

    def repatched(fn: Any) -> Any:
        # A jit helper's call (tl.max, tl.sum, the kernel's own) re-patches the language: put ours back on top.
        scope = patch_lang(fn)
        for owner, name, value in patches:
            setattr(owner, name, value)
        if tracer is not None:
            tracer.patched(fn)
        return scope

    for owner, name, value in [*patches, (module, "_patch_lang", repatched)]:
        install(owner, name, value)
    return restore


_batched_builders: dict[int, dict[str, Any]] = {}


def _batched_builder(module: ModuleType) -> dict[str, Any]:
    """The grid's builder methods, those that make pointers keeping their argument (made once per builder)."""
    key = id(module.InterpreterBuilder)
    found = _batched_builders.get(key)
    if found is None:
        found = _batched_builders[key] = {
            n: provenance.derived(f, n) if n in provenance.PROVENANCE else f
            for n, f in grid.builder_methods(module).items()
        }
    return found


def _uninstall(restore: list[Patch]) -> None:
    for owner, name, value in reversed(restore):
        if value is _ABSENT:
            delattr(owner, name)
        else:
            setattr(owner, name, value)


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
    """The first exception of type `kind` in `exc`'s chain (its causes and contexts), None when none is."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
