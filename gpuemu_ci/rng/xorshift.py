"""Deterministic random numbers, bit-identical to gpuemu's published generator.

The algorithm: SplitMix64 seeding, gpuemu's xorshift128+ variant (new ``s1 = x ^ y``
instead of the textbook ``x``), and BLAKE2b-8 domain derivation. Every value is computed with integer
arithmetic and exact float scaling, so the same seed gives the same numbers on every machine.

``SeededRng.u64_array`` returns long stretches of the very same stream as NumPy arrays. The state update is
linear over GF(2), so the stream is cut into lanes that start at jumped-ahead states
(:mod:`gpuemu_ci.rng.jump`) and are stepped in lock-step with NumPy uint64 arithmetic.
"""

from __future__ import annotations

import hashlib
import math
import operator
from collections.abc import MutableSequence, Sequence
from typing import Any, TypeVar

import numpy as np

from gpuemu_ci.rng.jump import PowerCache, lane_starts, work_buffer

__all__ = ["SeededRng", "derive_seed", "splitmix64"]

_T = TypeVar("_T")

_MASK64 = (1 << 64) - 1
_TWO_POW_53 = float(1 << 53)
_TWO_POW_24 = float(1 << 24)

# Below this many outputs the plain loop beats the set-up cost of the lane machinery.
_VECTOR_MIN = 256
# Lanes are 2^p outputs long. More lanes cost more jumps; fewer lanes cost more NumPy calls per output, so
# the balance point grows like sqrt(n). Past about two thousand lanes the block buffers outgrow the L2 cache.
_LANE_FACTOR = 32
_MAX_LANES = 2048
# Steps per block. The transposing copy moves runs of this many outputs per lane: runs shorter than 32 make
# it several times slower, while the block buffers grow with it.
_BLOCK_STEPS = 64


def _shift_amount(bits: int) -> np.ndarray:
    # A read-only 0-d array: a NumPy scalar operand is converted on every call, which adds ~70% to the
    # fixed cost of each of the thousands of small ufunc calls below.
    amount = np.array(bits, dtype=np.uint64)
    amount.flags.writeable = False
    return amount


_S23 = _shift_amount(23)
_S17 = _shift_amount(17)
_S26 = _shift_amount(26)


def _as_int(value: object, what: str) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an integer, not bool")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{what} must be an integer, got {type(value).__name__}") from None


def _as_u64(value: object, what: str) -> int:
    as_int = _as_int(value, what)
    if not 0 <= as_int <= _MASK64:
        raise ValueError(f"{what} must be in [0, 2**64), got {as_int}")
    return as_int


def _as_count(value: object, what: str) -> int:
    as_int = _as_int(value, what)
    if as_int < 0:
        raise ValueError(f"{what} must be non-negative, got {as_int}")
    return as_int


def splitmix64(x: int) -> int:
    """One SplitMix64 output for input ``x`` (all arithmetic mod 2^64)."""
    z = (_as_u64(x, "x") + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def derive_seed(seed: int, domain: str) -> int:
    """Child seed for ``domain``: BLAKE2b (digest size 8) of the 8-byte LE seed + UTF-8 domain, read LE."""
    if not isinstance(domain, str):
        raise TypeError(f"domain must be a str, got {type(domain).__name__}")
    digest = hashlib.blake2b(_as_u64(seed, "seed").to_bytes(8, "little"), digest_size=8)
    digest.update(domain.encode("utf-8"))
    return int.from_bytes(digest.digest(), "little")


def _step_state(s0: int, s1: int) -> tuple[int, int]:
    """The state transition alone (GF(2)-linear); the jump matrices are built from it."""
    x = s0 ^ ((s0 << 23) & _MASK64)
    x ^= x >> 17
    x ^= s1 ^ (s1 >> 26)
    return s1, x ^ s1


_POWERS = PowerCache(_step_state)


class SeededRng:
    """gpuemu's seeded generator: SplitMix64-seeded xorshift128+ (gpuemu variant).

    Not thread-safe: give each thread its own generator (``derive`` or ``copy``).
    """

    __slots__ = ("_s0", "_s1", "_seed")

    def __init__(self, seed: int) -> None:
        self._seed = _as_u64(seed, "seed")
        self._s0 = splitmix64(self._seed)
        self._s1 = splitmix64((self._seed + 1) & _MASK64)
        if self._s0 == 0 and self._s1 == 0:
            self._s0 = 1  # an all-zero xorshift state would only ever output zeros

    @classmethod
    def from_state(cls, seed: int, state: tuple[int, int]) -> SeededRng:
        """A generator with the given original ``seed`` (used by ``derive``) and current ``state``."""
        s0, s1 = state
        s0 = _as_u64(s0, "state[0]")
        s1 = _as_u64(s1, "state[1]")
        if s0 == 0 and s1 == 0:
            raise ValueError("state (0, 0) is not reachable: xorshift128+ would output only zeros")
        rng = cls.__new__(cls)
        rng._seed = _as_u64(seed, "seed")
        rng._s0, rng._s1 = s0, s1
        return rng

    @property
    def seed(self) -> int:
        """The seed this generator was created from (``derive`` hashes this, not the current state)."""
        return self._seed

    @property
    def state(self) -> tuple[int, int]:
        """The current ``(s0, s1)`` state."""
        return self._s0, self._s1

    def copy(self) -> SeededRng:
        """An independent generator with the same seed and current state."""
        return SeededRng.from_state(self._seed, (self._s0, self._s1))

    def __copy__(self) -> SeededRng:
        return self.copy()

    def __deepcopy__(self, memo: dict[int, Any]) -> SeededRng:
        return self.copy()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SeededRng):
            return NotImplemented
        return (self._seed, self._s0, self._s1) == (other._seed, other._s0, other._s1)

    __hash__ = None  # type: ignore[assignment]  # mutable: equality follows the state

    def __repr__(self) -> str:
        return f"SeededRng(seed={self._seed}, state=({self._s0:#018x}, {self._s1:#018x}))"

    # -- scalar draws -------------------------------------------------------------------------------------

    def gen_u64(self) -> int:
        """Next 64-bit output; advances the state by one step."""
        x = self._s0
        y = self._s1
        self._s0 = y
        x ^= (x << 23) & _MASK64
        x ^= x >> 17
        x ^= y ^ (y >> 26)
        self._s1 = x ^ y
        return (x + y) & _MASK64

    def gen_f64(self) -> float:
        """Uniform float in [0, 1) from the top 53 bits of one output (exact)."""
        return (self.gen_u64() >> 11) / _TWO_POW_53

    def gen_f32(self) -> float:
        """Uniform float32 value in [0, 1) from the top 24 bits of one output, returned as a Python float."""
        return (self.gen_u64() >> 40) / _TWO_POW_24

    def gen_range(self, lo: int, hi: int) -> int:
        """Integer in [lo, hi) as ``lo + u mod (hi - lo)`` (upstream accepts the modulo bias)."""
        lo = operator.index(lo)
        hi = operator.index(hi)
        span = hi - lo
        if not 0 < span <= 1 << 64:
            raise ValueError(f"gen_range needs lo < hi with hi - lo <= 2**64, got lo={lo}, hi={hi}")
        return lo + self.gen_u64() % span

    def choice_index(self, n: int) -> int:
        """Index in [0, n) as ``u mod n``."""
        n = operator.index(n)
        if not 0 < n <= 1 << 64:
            raise ValueError(f"choice_index needs 1 <= n <= 2**64, got {n}")
        return self.gen_u64() % n

    def choice(self, seq: Sequence[_T]) -> _T:
        """Element ``seq[u mod len(seq)]``."""
        if len(seq) == 0:
            raise ValueError("cannot choose from an empty sequence")
        return seq[self.choice_index(len(seq))]

    def gen_bool(self, p: float) -> bool:
        """True with probability ``p``: ``gen_f64() < p`` (always consumes one output)."""
        return self.gen_f64() < p

    def shuffle(self, items: MutableSequence[Any]) -> None:
        """Shuffle in place, Fisher-Yates from the end: for i = len-1 .. 1, swap i with ``u mod (i+1)``."""
        for i in range(len(items) - 1, 0, -1):
            j = self.gen_u64() % (i + 1)
            items[i], items[j] = items[j], items[i]

    def derive(self, domain: str) -> SeededRng:
        """Child generator seeded by ``derive_seed(self.seed, domain)``; independent of the current state."""
        return SeededRng(derive_seed(self._seed, domain))

    def advance(self, n: int) -> None:
        """Skip ``n`` outputs, as if ``gen_u64`` had been called ``n`` times (cost O(log n))."""
        n = _as_count(n, "n")
        if n < 64:
            for _ in range(n):
                self.gen_u64()
        else:
            self._s0, self._s1 = _POWERS.jump(self._s0, self._s1, n)

    # -- arrays -------------------------------------------------------------------------------------------

    def u64_array(self, n: int) -> np.ndarray:
        """The next ``n`` outputs as a uint64 array: exactly ``n`` calls of ``gen_u64``, same final state."""
        n = _as_count(n, "n")
        if n < _VECTOR_MIN:
            gen = self.gen_u64
            return np.array([gen() for _ in range(n)], dtype=np.uint64)
        out, (self._s0, self._s1) = _lanes_u64(self._s0, self._s1, n)
        return out

    def f64_array(self, n: int) -> np.ndarray:
        """The next ``n`` ``gen_f64`` values as a float64 array (exact, same final state)."""
        return (self.u64_array(n) >> np.uint64(11)).astype(np.float64) * (1.0 / _TWO_POW_53)


def _log2_lane_length(n: int) -> int:
    """Lane length 2^p: the smallest power of two (at least 2) giving fewer lanes than the target."""
    target = min(_MAX_LANES, math.isqrt(_LANE_FACTOR * n))
    p = 1
    while (n >> p) >= target:
        p += 1
    return p


def _row_width(lanes: int) -> int:
    """Row length of the lane buffers: ``lanes`` plus up to 15 idle lanes, making it an odd number of lines.

    Rows whose byte stride is (close to) a multiple of 4 KiB put the same column of every row into one L1
    cache set, and reading a column (the transposing copy below) then thrashes. The idle lanes keep every
    buffer C-contiguous, which matters too: ufunc calls on non-contiguous 2-D views cost twice as much.
    """
    return 8 * (-(-lanes // 8) | 1)


def _lane_buffer(name: str, rows: int, width: int) -> np.ndarray:
    return work_buffer(name, rows * width).reshape(rows, width)


def _lanes_u64(s0: int, s1: int, n: int) -> tuple[np.ndarray, tuple[int, int]]:
    """``n`` outputs from state ``(s0, s1)`` and the state after them, via lock-step lanes.

    With ``z`` the sequence of words such that the state at step ``k`` is ``(z[k], z[k+1])``, the step is
    ``z[k+2] = g(z[k]) ^ (z[k+1] >> 26)`` with ``g(x) = a ^ (a >> 17)``, ``a = x ^ (x << 23)``, and the
    output is ``(z[k+2] ^ z[k+1]) + z[k+1]``. Lane ``j`` covers stream positions ``j*m .. j*m+m-1``. A block
    of ``z`` rows is computed for all lanes at once, then its outputs are copied into stream order.
    """
    log2_m = _log2_lane_length(n)
    m = 1 << log2_m
    lanes = -(-n // m)
    block = min(_BLOCK_STEPS, m)
    starts = lane_starts(_POWERS, s0, s1, log2_m, lanes)

    width = _row_width(lanes)
    z = _lane_buffer("rng.z", block + 2, width)  # rows 0, 1: carried state; rows 2 .. block+1: this block
    z[0, :lanes] = starts[:, 0]
    z[1, :lanes] = starts[:, 1]
    z[0:2, lanes:] = 0  # idle lanes: the all-zero state stays zero
    g_pair = _lane_buffer("rng.g", 2, width)
    tmp_pair = _lane_buffer("rng.tmp_pair", 2, width)
    tmp = work_buffer("rng.tmp", width)
    outs = _lane_buffer("rng.outs", block, width)

    out = np.empty(n, dtype=np.uint64)
    full = out[: (lanes - 1) * m].reshape(lanes - 1, m)  # every lane but the last is m long
    tail = out[(lanes - 1) * m :]
    tail_len = tail.shape[0]  # 1 .. m outputs of the last lane
    final: tuple[int, int] | None = None

    # Views are made once: the loop below is ~n/lanes NumPy calls, so per-call overhead matters.
    shl, shr, xor, add = np.left_shift, np.right_shift, np.bitwise_xor, np.add
    g0, g1 = g_pair
    pairs = [(z[k : k + 2], z[k + 1], z[k + 2], z[k + 3]) for k in range(0, block, 2)]
    z_next, z_prev = z[2:], z[1:-1]
    outs_by_lane = outs[:, : lanes - 1].T
    last_lane = outs[:, lanes - 1]
    for k0 in range(0, m, block):
        for rows, z1, z2, z3 in pairs:
            # g() of two consecutive rows in one call halves the call count; the ">> 26" part is serial.
            shl(rows, _S23, g_pair)
            xor(g_pair, rows, g_pair)
            shr(g_pair, _S17, tmp_pair)
            xor(g_pair, tmp_pair, g_pair)
            shr(z1, _S26, tmp)
            xor(g0, tmp, z2)
            shr(z2, _S26, tmp)
            xor(g1, tmp, z3)
        xor(z_next, z_prev, outs)
        add(outs, z_prev, outs)
        full[:, k0 : k0 + block] = outs_by_lane
        if k0 < tail_len:
            stop = min(tail_len, k0 + block)
            tail[k0:stop] = last_lane[: stop - k0]
        if final is None and k0 <= tail_len <= k0 + block:
            final = (int(z[tail_len - k0, lanes - 1]), int(z[tail_len - k0 + 1, lanes - 1]))
        z[0:2] = z[block : block + 2]
    assert final is not None  # tail_len is in 1..m, so some block holds it
    return out, final
