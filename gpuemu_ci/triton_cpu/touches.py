"""Which programs of a vectorised launch read, or wrote, each element of one buffer (grid.py's race watch).

The exact record is a shadow per element: the lowest and highest program id that touched it (so "another
program than mine touched it" is `high >= 0 and (low != mine or high != mine)`), kept with `np.minimum.at` /
`np.maximum.at`. Most launches never need it: programs touch disjoint parts of a buffer (a row each, a tile
each), or only read it. So a `Touches` first keeps its accesses as a log, with each access's lanes' element
indices and the programs of its rows, and answers the question "did a program other than each lane's own
touch the lane's element" from each program's *envelope* (the lowest and highest element it touched): when no
envelope of another program overlaps a lane's program's envelope, no element can be shared, which is
exactly the answer the shadows would give. Only when envelopes of different programs overlap (tiles of a
2-D block, every program reading one vector, interleaved programs), or the log grows past the buffer's size,
are the shadows made from the log (the same shadows the accesses would have marked one by one: min and max
do not depend on the order) and the exact test run from then on. Either way the answer is the exact one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_NONE = np.iinfo(np.int64).max
# Envelope sets of up to this many pairs are compared pairwise when they are not disjoint among themselves.
_PAIRWISE = 1 << 16
# A buffer's log holds at most this many lanes per element (8 bytes each, against the shadows' 16 per
# element) before the shadows are made from it.
LOG_LIMIT = 4

Envelopes = tuple[np.ndarray, np.ndarray, np.ndarray]  # (program, lowest element, highest element)


@dataclass(frozen=True)
class Access:
    """One access's lanes in a buffer, in program-major order: `index` the element index of each active lane,
    `row_pids` the program of each row of the (rows, *block) value (one row: the value is uniform and its
    lanes count as the first program's, as grid.lane_programs counts them), `counts` the active lanes of each
    row (None: every row has `index.size // rows` lanes)."""

    index: np.ndarray
    row_pids: np.ndarray
    counts: np.ndarray | None

    def lane_pids(self) -> np.ndarray:
        """The program of every active lane, flat."""
        if self.counts is None:
            return np.repeat(self.row_pids, self.index.size // self.row_pids.size)
        return np.repeat(self.row_pids, self.counts)

    def envelopes(self) -> Envelopes:
        """(program, lowest element, highest element) of each row with an active lane."""
        rows = self.row_pids.size
        if self.counts is None:
            if self.index.size == 0:
                return _empty()
            per_row = self.index.reshape(rows, -1)
            return self.row_pids, per_row.min(axis=1), per_row.max(axis=1)
        nonzero = self.counts > 0
        if not nonzero.any():
            return _empty()
        starts = (np.cumsum(self.counts) - self.counts)[nonzero]
        low = np.minimum.reduceat(self.index, starts)
        high = np.maximum.reduceat(self.index, starts)
        return self.row_pids[nonzero], low, high


def _empty() -> Envelopes:
    none = np.zeros(0, dtype=np.int64)
    return none, none, none


class Touches:
    """One buffer's touches of one kind (reads or writes) in the launch so far."""

    def __init__(self, size: int) -> None:
        self.size = size  # elements of the buffer (+1), the shadows' length
        self.log: list[Access] = []
        self.logged = 0  # lanes in the log
        self.shadows: tuple[np.ndarray, np.ndarray] | None = None  # (low, high) once exact
        self._merged: Envelopes | None = None  # the log's envelopes, per program

    def copy(self) -> Touches:
        """An independent copy (a checkpoint): the log's arrays are never written, the shadows are."""
        made = Touches(self.size)
        made.log, made.logged, made._merged = list(self.log), self.logged, self._merged
        if self.shadows is not None:
            made.shadows = (self.shadows[0].copy(), self.shadows[1].copy())
        return made

    @property
    def exact(self) -> bool:
        """Whether the record is per element (shadows) rather than a log of envelopes."""
        return self.shadows is not None

    def make_exact(self) -> None:
        """The shadows, from the log (what marking each access in turn would have made)."""
        if self.shadows is not None:
            return
        low, high = np.full(self.size, _NONE, dtype=np.int64), np.full(self.size, -1, dtype=np.int64)
        for access in self.log:
            pids = access.lane_pids()
            np.minimum.at(low, access.index, pids)
            np.maximum.at(high, access.index, pids)
        self.shadows = (low, high)
        self.log, self.logged, self._merged = [], 0, None

    def add(self, access: Access) -> None:
        """Record an access: marked in the shadows when they are exact, else logged by its envelope."""
        if self.shadows is not None:
            self.mark(access.index, access.lane_pids())
            return
        self.log.append(access)
        self.logged += access.index.size
        self._merged = None
        if self.logged > LOG_LIMIT * self.size:  # the log would outgrow the shadows: bounded by them instead
            self.make_exact()

    def mark(self, index: np.ndarray, pids: np.ndarray) -> None:
        """Exact mode: record lanes with their programs."""
        assert self.shadows is not None
        np.minimum.at(self.shadows[0], index, pids)
        np.maximum.at(self.shadows[1], index, pids)

    def others(self, index: np.ndarray, pids: np.ndarray) -> bool:
        """Exact mode: whether a program other than each lane's own touched the lane's element."""
        assert self.shadows is not None
        low, high = self.shadows[0][index], self.shadows[1][index]
        return bool(np.any((high >= 0) & ((low != pids) | (high != pids))))

    def envelopes(self) -> Envelopes:
        """(program, lowest, highest element) per program over the log, sorted by program."""
        if self._merged is None:
            parts = [access.envelopes() for access in self.log]
            pids = np.concatenate([p for p, _, _ in parts]) if parts else np.zeros(0, dtype=np.int64)
            low = np.concatenate([lo for _, lo, _ in parts]) if parts else pids
            high = np.concatenate([hi for _, _, hi in parts]) if parts else pids
            self._merged = _per_program(pids, low, high)
        return self._merged


def _per_program(pids: np.ndarray, low: np.ndarray, high: np.ndarray) -> Envelopes:
    """Envelopes merged per program (the lowest low and the highest high of each), sorted by program."""
    if pids.size <= 1:
        return pids, low, high
    order = np.argsort(pids, kind="stable")
    pids, low, high = pids[order], low[order], high[order]
    starts = np.flatnonzero(np.concatenate(([True], pids[1:] != pids[:-1])))
    if starts.size == pids.size:
        return pids, low, high
    return pids[starts], np.minimum.reduceat(low, starts), np.maximum.reduceat(high, starts)


def apart(theirs: Envelopes, mine: Envelopes) -> bool:
    """Whether no envelope of `theirs` (one per program) overlaps an envelope of `mine` of another program:
    then no element was touched by both. False means only that the envelopes cannot tell (ask the shadows)."""
    t_pids, t_low, t_high = theirs
    m_pids, m_low, m_high = mine
    if t_pids.size == 0 or m_pids.size == 0:
        return True
    if t_pids.size == 1 and m_pids.size == 1:
        return bool(t_pids[0] == m_pids[0] or t_high[0] < m_low[0] or m_high[0] < t_low[0])
    order = np.argsort(t_low, kind="stable")
    s_pids, s_low, s_high = t_pids[order], t_low[order], t_high[order]
    if bool(np.all(s_high[:-1] < s_low[1:])):
        # Disjoint among themselves: each of mine meets a contiguous run of them, found by bisection.
        first = np.searchsorted(s_high, m_low, side="left")  # the first whose high reaches my low
        end = np.searchsorted(s_low, m_high, side="right")  # past the last whose low is within my high
        met = end - first
        if bool(np.any(met > 1)):
            return False  # two programs' envelopes (theirs are one per program): one of them is another's
        single = met == 1
        return bool(np.all(s_pids[first[single]] == m_pids[single]))
    if t_pids.size * m_pids.size > _PAIRWISE:
        return False
    meets = (t_low[:, None] <= m_high[None, :]) & (m_low[None, :] <= t_high[:, None])
    return not bool(np.any(meets & (t_pids[:, None] != m_pids[None, :])))


def apart_between_programs(mine: Envelopes) -> bool:
    """Whether no two programs' envelopes of one access overlap (then no element is written by two programs
    in it); False: the envelopes cannot tell."""
    pids, low, high = mine
    if pids.size < 2:
        return True
    order = np.argsort(low, kind="stable")
    return bool(np.all(high[order][:-1] < low[order][1:]))
