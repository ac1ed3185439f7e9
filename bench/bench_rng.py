"""Throughput of ``SeededRng.u64_array`` against a plain Python loop and NumPy's own generator, in one run.

It times, interleaved round by round so that machine load hits all three alike:
  u64_array  - ``SeededRng(seed).u64_array(n)`` (vectorised: jump-ahead lanes stepped with NumPy)
  loop       - ``[rng.gen_u64() for _ in range(k)]`` turned into a uint64 array: the same stream, one
               element at a time; k = n unless --loop-n is smaller, in which case the time is scaled
               linearly to n (a short loop costs a little less per element, so scaling is conservative)
  numpy      - ``np.random.default_rng(0).integers(0, 2**63, size=n, dtype=np.uint64)``
Each is timed by wall clock and by process CPU time, keeping the best of each. On a busy machine a long
loop gets preempted far more often than a 4 ms call, which flatters the wall-clock speedup; CPU time does
not count preemption. The verdict uses whichever of the two ratios is worse for gpuemu-ci. Targets:
  speedup vs python loop >= 100x, slowdown vs numpy Generator.integers <= 5x.

    python bench/bench_rng.py [--n 1000000] [--loop-n N] [--rounds 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuemu_ci.rng import SeededRng

SPEEDUP_TARGET = 100.0
SLOWDOWN_TARGET = 5.0


@dataclass
class Timing:
    """Best wall-clock and best CPU time seen so far, in seconds."""

    wall: float = float("inf")
    cpu: float = float("inf")

    def measure(self, fn: Callable[[], object], calls: int) -> None:
        for _ in range(calls):
            wall0, cpu0 = time.perf_counter(), time.process_time()
            fn()
            cpu1, wall1 = time.process_time(), time.perf_counter()
            self.wall = min(self.wall, wall1 - wall0)
            self.cpu = min(self.cpu, cpu1 - cpu0)


def python_loop(seed: int, count: int) -> np.ndarray:
    """The plain per-element loop a user would write without ``u64_array``."""
    gen = SeededRng(seed).gen_u64
    return np.array([gen() for _ in range(count)], dtype=np.uint64)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="outputs per call (default 1000000)")
    parser.add_argument(
        "--loop-n", type=int, default=None, help="outputs timed for the Python loop (default n; scaled to n)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (best is kept)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)
    if args.n < 1 or (args.loop_n is not None and args.loop_n < 1) or args.rounds < 1:
        parser.error("--n, --loop-n and --rounds must be positive")
    n, seed = args.n, args.seed
    loop_n = n if args.loop_n is None else min(n, args.loop_n)

    # Same stream, same end state: the comparison is only meaningful if the outputs agree.
    check_n = min(n, 100_000)
    fast_rng, slow_rng = SeededRng(seed), SeededRng(seed)
    head = fast_rng.u64_array(check_n)
    if not np.array_equal(head, np.array([slow_rng.gen_u64() for _ in range(check_n)], dtype=np.uint64)):
        print("FAIL: u64_array differs from the gen_u64 loop", file=sys.stderr)
        return 2
    if fast_rng.state != slow_rng.state:
        print("FAIL: u64_array leaves a different state than the gen_u64 loop", file=sys.stderr)
        return 2

    generator = np.random.default_rng(0)
    vec, loop, ref = Timing(), Timing(), Timing()
    for _ in range(args.rounds):
        vec.measure(lambda: SeededRng(seed).u64_array(n), 10)
        ref.measure(lambda: generator.integers(0, 2**63, size=n, dtype=np.uint64), 10)
        loop.measure(lambda: python_loop(seed, loop_n), 1)
    scale = n / loop_n
    loop = Timing(loop.wall * scale, loop.cpu * scale)

    scaled = f" (timed {loop_n} outputs, scaled x{scale:g})" if loop_n < n else ""
    print(f"n = {n}, seed = {seed}, best of {args.rounds} interleaved rounds (wall clock / CPU time)")
    for name, t in (("u64_array", vec), ("python gen_u64 loop", loop), ("numpy integers", ref)):
        rate = n / t.wall / 1e6
        note = scaled if t is loop else ""
        print(f"  {name:20s} {t.wall * 1e3:10.3f} ms / {t.cpu * 1e3:10.3f} ms  {rate:9.2f} M values/s{note}")

    speedup = min(loop.wall / vec.wall, loop.cpu / vec.cpu)
    slowdown = max(vec.wall / ref.wall, vec.cpu / ref.cpu)
    ok_speedup = speedup >= SPEEDUP_TARGET
    ok_slowdown = slowdown <= SLOWDOWN_TARGET
    print(
        f"speedup vs python loop: {speedup:.1f}x (wall {loop.wall / vec.wall:.1f}x, "
        f"cpu {loop.cpu / vec.cpu:.1f}x; target >= {SPEEDUP_TARGET:g}x) {'PASS' if ok_speedup else 'MISS'}"
    )
    print(
        f"slowdown vs numpy Generator.integers: {slowdown:.2f}x (wall {vec.wall / ref.wall:.2f}x, "
        f"cpu {vec.cpu / ref.cpu:.2f}x; target <= {SLOWDOWN_TARGET:g}x) {'PASS' if ok_slowdown else 'MISS'}"
    )
    return 1 if args.strict and not (ok_speedup and ok_slowdown) else 0


if __name__ == "__main__":
    sys.exit(main())
