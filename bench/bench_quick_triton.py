"""The corpus's quick suite with and without its Triton entries, side by side in one run (issue #29's target:
the whole quick suite under 2x the time of its NumPy-only part, Triton kernels vectorised under the
GPU-faithful layer).

Each side is `python -m gpuemu_ci run --suite quick` on `bench/corpus/gpuemu.toml` in a subprocess, as a user
runs it: "numpy only" passes `--op` for every op that does not launch Triton kernels, "with triton" runs every
op. Runs alternate (numpy only, with triton, numpy only, ...) so that both sides see the same load on a shared
machine; the script prints each run, the medians, the ratio, and the Triton ops' launches (vectorised, in
groups, or one program at a time and why) from the last "with triton" run.

    python bench/bench_quick_triton.py [--runs 3] [--seed 1] [--jobs N] [--target 2.0]

Exit status: 0 when the median ratio is at most --target, 1 otherwise, 2 when a run fails.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CORPUS = HERE / "corpus" / "gpuemu.toml"
sys.path.insert(0, str(REPO))

from gpuemu_ci.config.load import load_config  # noqa: E402

sys.path.insert(0, str(HERE))
from bench_quick_wall import profile, quick_suite  # noqa: E402  (a sibling script, not a package)

TRITON_MODULES = ("triton", "liger")  # op targets whose module names say they launch Triton kernels


def split_ops(config: Path) -> tuple[list[str], list[str]]:
    """(ops that launch no Triton kernel, ops that do), by their op target's module name."""
    numpy_ops, triton_ops = [], []
    for op in load_config(config).ops:
        module = op.targets.op.split(":")[0]
        (triton_ops if any(m in module for m in TRITON_MODULES) else numpy_ops).append(op.name)
    return numpy_ops, triton_ops


def run_quick(ops: list[str] | None, seed: int, jobs: int | None, out: Path) -> tuple[float, dict]:
    """One quick-suite run of the corpus (only `ops` when given): (wall seconds, results.json)."""
    return quick_suite(REPO, CORPUS, seed, jobs, out, tuple(ops or ()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each side (default 3)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, help="passed to gpuemu-ci run --jobs (default: the corpus's)")
    parser.add_argument("--target", type=float, default=2.0, help="the largest acceptable ratio")
    args = parser.parse_args(argv)
    numpy_ops, triton_ops = split_ops(CORPUS)
    sides: dict[str, list[str] | None] = {"numpy only": numpy_ops, "with triton": None}
    walls: dict[str, list[float]] = {side: [] for side in sides}
    cases: dict[str, int] = {}
    last: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-quick-triton-") as scratch:
        for run in range(args.runs):
            for side, ops in sides.items():
                try:
                    wall, results = run_quick(ops, args.seed, args.jobs, Path(scratch) / f"{run}-{side[0]}")
                except RuntimeError as exc:
                    print(f"bench_quick_triton: {side}: {exc}", file=sys.stderr)
                    return 2
                walls[side].append(wall)
                cases[side] = int(results["summary"]["cases_total"])
                last = results
                print(f"run {run + 1} {side:<12} {wall:6.1f} s  {cases[side]} cases", flush=True)
    medians = {side: statistics.median(values) for side, values in walls.items()}
    for side in sides:
        print(f"median {side:<12} {medians[side]:6.1f} s  {cases[side]} cases")
    print(
        f"{len(triton_ops)} Triton ops, {cases['with triton'] - cases['numpy only']} cases; their launches:"
    )
    launches: dict[str, int] = {}
    for op in last.get("ops", []):
        if op["name"] in triton_ops:
            for how, count in op.get("triton_launches", {}).items():
                launches[how] = launches.get(how, 0) + int(count)
    for how, count in sorted(launches.items(), key=lambda item: -item[1]):
        print(f"  {count:5d}  {how}")
    split = profile({**last, "ops": [op for op in last.get("ops", []) if op["name"] in triton_ops]})
    if split is not None:
        print("where the Triton ops' time went in the last run (seconds, summed over the workers):")
        print(split)
    ratio = medians["with triton"] / medians["numpy only"]
    print(f"ratio with triton / numpy only: {ratio:.2f} (target <= {args.target:g})")
    return 0 if ratio <= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
