"""The fast test tier's wall time against its budget, measured as a ratio to a fixed reference workload run in
the same job, so that the machine's speed (and most of its load) cancels out.

The fast tier is `python -m pytest -m "not slow"`, what `.ci/check` runs after the linters. Its budget is a
minute on a two-core machine (tests/README.md, "Markers"); a CI runner may be faster or slower than that, so the
tier is timed next to a reference workload whose cost does not change with the code: a fixed amount of Python
interpretation, compilation of generated source (what imports and pytest's assertion rewriting cost) and
starting Python processes (what the tests' subprocesses cost), in that proportion. The reference runs before
and after the tier (twice each by default) and the tier is divided by their median; the spread of the
reference runs is printed, so a noisy machine shows itself.

    python bench/bench_fast_tier.py [--budget 10.5] [--reference-runs 2] [-- PYTEST ARGS...]

Prints the reference runs, the tier's wall and CPU time (its processes and theirs), and both ratios. Exit status:
0 when the tier passed and both ratios are at most --budget, 1 when one is over it or a test failed. The CPU
ratio is the steady one on a busy machine; the wall ratio also catches time spent waiting.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# The ratio the tier may reach, in wall time and in CPU time: a minute on a machine where the reference takes
# 5.7 s. The reference needs 5.6 s of CPU time (user + system, its child processes included; measured with
# /usr/bin/time on a two-core machine), which is its wall time on an idle machine; 60 / 5.7 = 10.5.
DEFAULT_BUDGET = 10.5

# The reference workload, run as `python -c REFERENCE`: the same work every time, whatever the checkout holds.
REFERENCE = r"""
import subprocess, sys
total = 0
# Interpretation: dicts, strings and calls, as test bodies and fixtures are.
for round_ in range(300):
    table = {f"key{i}": i * round_ for i in range(20000)}
    total += sum(len(k) + v for k, v in table.items() if v % 3)
# Compilation: a generated module of functions, as imports and assertion rewriting are.
source = "\n".join(f"def f{i}(x, y):\n    z = [x * k + y for k in range({i % 7 + 1})]\n    return sum(z)\n"
                   for i in range(1500))
for _ in range(16):
    namespace = {}
    exec(compile(source, "<reference>", "exec"), namespace)
    total += namespace["f5"](1, 2)
# Processes: fresh interpreters that import what a worker imports, as the tests' subprocesses do.
for _ in range(16):
    subprocess.run([sys.executable, "-c", "import json, numpy"], check=True)
print(total)
"""


def children_cpu() -> float:
    """CPU seconds (user + system) of every child process waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], env: dict[str, str] | None = None) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the command and its children, exit status)."""
    cpu_before, started = children_cpu(), time.monotonic()
    done = subprocess.run(command, cwd=REPO, env=env, check=False)
    return time.monotonic() - started, children_cpu() - cpu_before, done.returncode


def reference() -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of the reference workload."""
    wall, cpu, status = timed([sys.executable, "-c", REFERENCE])
    if status != 0:
        raise SystemExit(f"bench_fast_tier: the reference workload failed (exit {status})")
    return wall, cpu


def over_budget(what: str, ratio: float, budget: float) -> bool:
    """Prints why and returns True when `ratio` is over `budget`."""
    if ratio <= budget:
        return False
    print(
        f"bench_fast_tier: FAILED: the fast tier's {what} is {ratio:.2f} times the reference's, over its budget "
        f"of {budget:.2f}: move what made it slow to the slow tier (tests/README.md, The fast tier's budget)",
        file=sys.stderr,
    )
    return True


def main(argv: list[str] | None = None) -> int:
    """Runs the references and the tier, prints the figures, and returns the exit status."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET, help="the largest acceptable ratio")
    parser.add_argument(
        "--reference-runs", type=int, default=2, help="reference runs before the tier, and as many after"
    )
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)

    runs = [reference() for _ in range(args.reference_runs)]
    # This checkout's code, and the fast tier's property-test budget whatever the caller selected (.ci/run
    # selects the large one for the full suite), as .ci/check runs it.
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "HYPOTHESIS_PROFILE": "fast"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as .ci/check runs it: with Python's bytecode cache
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-m",
        "not slow",
        "-p",
        "no:cacheprovider",
        *args.pytest_args,
    ]
    tier_wall, tier_cpu, status = timed(command, env)
    runs += [reference() for _ in range(args.reference_runs)]

    walls = [wall for wall, _ in runs]
    median_wall = statistics.median(walls)
    median_cpu = statistics.median(cpu for _, cpu in runs)
    spread = (max(walls) - min(walls)) / median_wall
    wall_ratio, cpu_ratio = tier_wall / median_wall, tier_cpu / median_cpu
    print(f"bench_fast_tier: reference runs: {', '.join(f'{w:.2f}' for w in walls)} s")
    print(
        f"bench_fast_tier: reference median {median_wall:.2f} s wall (spread (max - min) / median {spread:.0%}), "
        f"{median_cpu:.2f} s CPU"
    )
    print(f"bench_fast_tier: fast tier: {tier_wall:.1f} s wall, {tier_cpu:.1f} s CPU (pytest exit {status})")
    print(
        f"bench_fast_tier: ratio fast tier / reference: wall {wall_ratio:.2f}, CPU {cpu_ratio:.2f} "
        f"(budget {args.budget:.2f} each)"
    )
    if status != 0:
        print("bench_fast_tier: FAILED: the fast tier did not pass", file=sys.stderr)
        return 1
    # Both: the CPU ratio is steady on a busy machine (the load changes wall times more than CPU times), the wall
    # ratio catches waiting (sleeps, timeouts) that costs no CPU.
    failed = [
        over_budget(what, ratio, args.budget)
        for what, ratio in (("wall time", wall_ratio), ("CPU time", cpu_ratio))
    ]
    return 1 if any(failed) else 0


if __name__ == "__main__":
    sys.exit(main())
