"""Throughput of ``SeededRng.u64_array`` against a plain Python loop and NumPy's own generator, in one run.

It times, interleaved round by round so that machine load hits all three alike:
  u64_array  - ``SeededRng(seed).u64_array(n)`` (vectorised: jump-ahead lanes stepped with NumPy)
  loop       - ``[rng.gen_u64() for _ in range(k)]`` turned into a uint64 array: the same stream, one
               element at a time; k = n unless --loop-n is smaller, in which case the time is scaled
               linearly to n (a short loop costs a little less per element, so scaling is conservative)
  numpy      - ``np.random.default_rng(0).integers(0, 2**63, size=n, dtype=np.uint64)``
and prints the best time of each, the throughputs, and the ratios against the targets:
  speedup vs python loop >= 100x, slowdown vs numpy Generator.integers <= 5x.

    python bench/bench_rng.py [--n 1000000] [--loop-n N] [--rounds 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import numpy as np

from gpuemu_ci.rng import SeededRng

SPEEDUP_TARGET = 100.0
SLOWDOWN_TARGET = 5.0


def best_time(fn: Callable[[], object], calls: int) -> float:
    """Best wall time of ``calls`` calls of ``fn``, in seconds."""
    best = float("inf")
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


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
    t_vec = t_loop = t_np = float("inf")
    for _ in range(args.rounds):
        t_vec = min(t_vec, best_time(lambda: SeededRng(seed).u64_array(n), 10))
        t_np = min(t_np, best_time(lambda: generator.integers(0, 2**63, size=n, dtype=np.uint64), 10))
        t_loop = min(t_loop, best_time(lambda: python_loop(seed, loop_n), 1))
    t_loop_n = t_loop * n / loop_n

    speedup = t_loop_n / t_vec
    slowdown = t_vec / t_np
    scaled = f" (timed {loop_n} outputs, scaled x{n / loop_n:g})" if loop_n < n else ""
    print(f"n = {n}, seed = {seed}, best of {args.rounds} interleaved rounds")
    print(f"  u64_array            {t_vec * 1e3:10.3f} ms  {n / t_vec / 1e6:9.1f} M values/s")
    print(f"  python gen_u64 loop  {t_loop_n * 1e3:10.3f} ms  {n / t_loop_n / 1e6:9.2f} M values/s{scaled}")
    print(f"  numpy integers       {t_np * 1e3:10.3f} ms  {n / t_np / 1e6:9.1f} M values/s")
    ok_speedup = speedup >= SPEEDUP_TARGET
    ok_slowdown = slowdown <= SLOWDOWN_TARGET
    print(
        f"speedup vs python loop: {speedup:.1f}x (target >= {SPEEDUP_TARGET:g}x) "
        f"{'PASS' if ok_speedup else 'MISS'}"
    )
    print(
        f"slowdown vs numpy Generator.integers: {slowdown:.2f}x (target <= {SLOWDOWN_TARGET:g}x) "
        f"{'PASS' if ok_slowdown else 'MISS'}"
    )
    return 1 if args.strict and not (ok_speedup and ok_slowdown) else 0


if __name__ == "__main__":
    sys.exit(main())
