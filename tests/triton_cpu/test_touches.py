"""The race watch of a vectorised launch (gpuemu_ci/triton_cpu/touches.py, grid.watch_rows): it first tries to
prove programs apart by the envelopes of the elements they touched, and asks per-element shadows only where it
cannot. Whatever path it takes, it must stop the pass exactly where, and with the message, that a plain
per-element record of who read and wrote what would: checked here against such a record on accesses made to
take each path (apart, overlapping but not sharing an element, overlapping and sharing one), and on random
ones."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from gpuemu_ci.triton_cpu import grid, touches
from gpuemu_ci.triton_cpu.touches import Access

SIZE = 64  # elements in the one buffer


@dataclass(frozen=True)
class Buffer:  # what the watch reads of an allocation
    buffer_start: int = 1 << 20
    buffer_end: int = (1 << 20) + 4 * SIZE
    itemsize: int = 4


# One access: (write?, [(program, [element, ...]) per row]); one row with program None: a uniform value
# (every program's, counted as the first program's, as the grid counts a value with a program axis of 1).
Step = tuple[bool, list[tuple[int | None, list[int]]]]


def reference(steps: list[Step], first: int) -> tuple[int, str] | None:
    """(index of the access that stops the pass, why), by sets of programs per element."""
    readers: dict[int, set[int]] = {}
    writers: dict[int, set[int]] = {}
    for at, (write, rows) in enumerate(steps):
        lanes = [(first if pid is None else pid, e) for pid, elements in rows for e in elements]
        if write:
            if any((readers.get(e, set()) | writers.get(e, set())) - {p} for p, e in lanes):
                return at, "write"
            for p, e in lanes:
                writers.setdefault(e, set()).add(p)
            if any(writers[e] - {p} for p, e in lanes):
                return at, "write"
        else:
            if any(writers.get(e, set()) - {p} for p, e in lanes):
                return at, "read"
            for p, e in lanes:
                readers.setdefault(e, set()).add(p)
    return None


def watched(steps: list[Step], pids: np.ndarray, checkpoint_at: int | None = None) -> tuple[int, str] | None:
    """The same accesses through grid.watch_rows, in one batch of `pids` (rows in the batch's order)."""
    batch = grid.Batch(np.zeros((pids.size, 3), dtype=np.int32), pids)
    for at, (write, rows) in enumerate(steps):
        if checkpoint_at == at:  # as a diverging batch does: the watch goes on from copies
            batch.readers = {k: t.copy() for k, t in batch.readers.items()}
            batch.writers = {k: t.copy() for k, t in batch.writers.items()}
        try:
            grid.watch_rows(batch, Buffer(), access(rows, pids), write)
        except grid.NotVectorisable as exc:
            return at, "write" if str(exc).startswith("programs write") else "read"
    return None


def access(rows: list[tuple[int | None, list[int]]], pids: np.ndarray) -> Access:
    """An access as the layer makes it: one row per program of the batch (inactive lanes left out), or one
    uniform row."""
    if rows[0][0] is None:
        return Access(np.array(rows[0][1], dtype=np.int64), pids[:1], None)
    by_pid = dict(rows)
    elements = [by_pid.get(int(p), []) for p in pids]
    counts = np.array([len(e) for e in elements])
    index = np.array([e for row in elements for e in row], dtype=np.int64)
    uniform = len(set(counts.tolist())) == 1 and counts[0] > 0
    return Access(index, pids, None if uniform else counts)


PIDS = np.array([2, 0, 3, 1])  # the batch's order: a permutation, as the launch's seeded order is


def rows_of(make: dict[int, list[int]]) -> list[tuple[int | None, list[int]]]:
    return [(p, e) for p, e in make.items()]


CASES: dict[str, list[Step]] = {
    # every program its own row: envelopes apart (the fast path)
    "rows apart": [
        (False, rows_of({p: list(range(8 * p, 8 * p + 8)) for p in range(4)})),
        (True, rows_of({p: list(range(8 * p, 8 * p + 8)) for p in range(4)})),
        (False, rows_of({p: list(range(8 * p, 8 * p + 8)) for p in range(4)})),
    ],
    # interleaved programs: every envelope overlaps every other, no element shared (per element: no clash)
    "interleaved": [
        (False, rows_of({p: list(range(p, 32, 4)) for p in range(4)})),
        (True, rows_of({p: list(range(p, 32, 4)) for p in range(4)})),
    ],
    # 2-D tiles of a 8x8 block: envelopes of tiles in one band overlap, no element shared
    "tiles": [
        (
            True,
            rows_of(
                {
                    p: [r * 8 + c + 4 * (p % 2) + 32 * (p // 2) for r in range(4) for c in range(4)]
                    for p in range(4)
                }
            ),
        ),
    ],
    # interleaved, and program 1 also writes program 2's element: a clash inside one store
    "interleaved race in one store": [
        (
            True,
            rows_of(
                {
                    0: list(range(0, 32, 4)),
                    1: [*range(1, 32, 4), 34],
                    2: list(range(2, 36, 4)),
                    3: list(range(3, 32, 4)),
                }
            ),
        ),
    ],
    # a program reads its right neighbour's first element, which the neighbour then writes
    "read then written by another": [
        (False, rows_of({p: list(range(8 * p, 8 * p + 9)) for p in range(4)})),
        (True, rows_of({p: list(range(8 * p, 8 * p + 8)) for p in range(4)})),
    ],
    # written first, then read by another program (envelopes of the read overlap one other program's write)
    "written then read by another": [
        (True, rows_of({p: list(range(8 * p, 8 * p + 8)) for p in range(4)})),
        (False, rows_of({p: [8 * p + 7, 8 * p + 8] for p in range(3)})),
    ],
    # every program reads one vector (a uniform row), then each writes its own part of it
    "shared vector then written": [
        (False, [(None, list(range(16)))]),
        (True, rows_of({p: [p] for p in range(4)})),
    ],
    # every program reads a shared vector, and writes elsewhere: no clash
    "shared vector, writes elsewhere": [
        (False, [(None, list(range(16)))]),
        (False, rows_of({p: list(range(16)) for p in range(4)})),
        (True, rows_of({p: [32 + p] for p in range(4)})),
    ],
    # a uniform store (every program the same element: the grid counts it as the first program's), then
    # the others read it
    "uniform store then read": [
        (True, [(None, [40])]),
        (False, rows_of({p: [40] for p in range(4)})),
    ],
    # some programs with no active lane, a program writing one element twice
    "masked rows": [
        (True, rows_of({0: [1, 1, 2], 3: [10, 11]})),
        (False, rows_of({0: [1], 3: [11, 12]})),
        (True, rows_of({1: [1]})),
    ],
    # more lanes than the log keeps per element of the buffer: the shadows take over, same answers
    "long log": [(False, rows_of({p: list(range(16 * p, 16 * p + 16)) for p in range(4)}))]
    * (touches.LOG_LIMIT + 2)
    + [(True, rows_of({p: list(range(16 * p, 16 * p + 16)) for p in range(4)})), (True, rows_of({0: [16]}))],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_watch_stops_where_a_per_element_record_does(name: str) -> None:
    steps = CASES[name]
    expected = reference(steps, int(PIDS[0]))
    assert watched(steps, PIDS) == expected
    for at in range(len(steps)):  # from copies taken anywhere (a diverging batch's checkpoint)
        assert watched(steps, PIDS, checkpoint_at=at) == expected


def test_the_cases_cover_every_outcome() -> None:
    outcomes = {name: reference(steps, int(PIDS[0])) for name, steps in CASES.items()}
    assert outcomes["rows apart"] is None and outcomes["interleaved"] is None and outcomes["tiles"] is None
    assert outcomes["interleaved race in one store"] == (0, "write")
    assert outcomes["read then written by another"] == (1, "write")
    assert outcomes["written then read by another"] == (1, "read")
    assert outcomes["shared vector then written"] == (1, "write")
    assert outcomes["uniform store then read"] == (1, "read")
    assert outcomes["long log"] == (touches.LOG_LIMIT + 3, "write")


def test_envelopes_prove_apart_only_what_is_apart() -> None:
    apart_rows = Access(np.arange(32, dtype=np.int64), PIDS, None).envelopes()
    assert touches.apart_between_programs(apart_rows)
    interleaved = Access(np.array([p + 4 * k for p in range(4) for k in range(8)]), PIDS, None).envelopes()
    assert not touches.apart_between_programs(interleaved)  # cannot tell: the shadows decide
    mine = Access(np.array([8, 9]), np.array([5]), None).envelopes()
    assert not touches.apart(apart_rows, mine)  # program 5 meets row 1 (program 0)
    own = Access(np.array([8, 9]), np.array([PIDS[1]]), None).envelopes()
    assert touches.apart(apart_rows, own)  # the same program's elements


@pytest.mark.parametrize("seed", range(40))
def test_random_accesses_stop_where_a_per_element_record_does(seed: int) -> None:
    rng = np.random.default_rng(seed)
    pids = rng.permutation(rng.integers(2, 7))
    steps: list[Step] = []
    for _ in range(rng.integers(1, 7)):
        write = bool(rng.random() < 0.5)
        if rng.random() < 0.15:
            steps.append(
                (write, [(None, sorted(rng.choice(SIZE, rng.integers(1, 6), replace=False).tolist()))])
            )
            continue
        spread = int(rng.integers(1, 4))  # 1: programs in their own ranges; more: overlapping ones
        rows = []
        for p in pids.tolist():
            if rng.random() < 0.2:
                continue  # a row with no active lane
            low = (p * SIZE // pids.size) if spread == 1 else int(rng.integers(0, SIZE // 2))
            width = SIZE // pids.size if spread == 1 else SIZE // 2
            count = int(rng.integers(1, 6))
            rows.append((p, sorted(rng.integers(low, low + width, count).tolist())))
        if rows:
            steps.append((write, rows))
    expected = reference(steps, int(pids[0]))
    assert watched(steps, pids) == expected
    assert watched(steps, pids, checkpoint_at=len(steps) // 2) == expected
