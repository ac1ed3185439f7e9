"""Wall time of the bug corpus's quick suite at an earlier revision and at this checkout, side by side.

Each side runs its own code on its own corpus (`bench/corpus/gpuemu.toml` of that tree), exactly as a user
would: `python -m gpuemu_ci run --suite quick --seed S` in a subprocess whose PYTHONPATH is that tree. The
earlier revision is extracted with `git archive` into a temporary directory. Runs alternate (before, after,
before, ...) so that both see the same load on a shared machine; the script prints each run, the medians and
their ratio, and the case counts (the corpus grows, so the per-case time is printed too). A third side runs
this checkout's code on the earlier revision's corpus, which separates what the code costs from what the
corpus's new entries cost (the earlier corpus must still be a valid config for this checkout).

    python bench/bench_quick_wall.py --before main --runs 3 [--seed 1] [--jobs N] [--config bench/field/gpuemu.toml]
    python bench/bench_quick_wall.py --before c746ac6 --config bench/gems_style/gpuemu.toml --suite-here

`--config` names the suite by its path inside each tree (default: the bug corpus); the cases of both sides must
then be equal for the ratio to mean anything, and the script says when they are not. After the medians it
prints where this checkout's last run spent its time (`gpuemu-ci run --profile`'s table, results/timings.py).

Exit status: 0 when the median ratio is at most --target (2.0), 1 otherwise, 2 for a bad revision.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CORPUS = "bench/corpus/gpuemu.toml"
sys.path.insert(0, str(REPO))  # this checkout's renderer for the time split


def extract(revision: str, into: Path) -> None:
    """`git archive REVISION` of this repository, unpacked into `into`."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", revision], capture_output=True, check=False
    )
    if archive.returncode != 0:
        raise ValueError(archive.stderr.decode(errors="replace").strip() or f"cannot archive {revision}")
    with tempfile.TemporaryFile() as tar_file:
        tar_file.write(archive.stdout)
        tar_file.seek(0)
        with tarfile.open(fileobj=tar_file) as tar:
            tar.extractall(into, filter="data")


def run_quick(
    code: Path,
    corpus: Path,
    seed: int,
    jobs: int | None,
    out: Path,
    suite: str = CORPUS,
    ops: tuple[str, ...] = (),
) -> tuple[float, dict]:
    """One quick-suite run of `corpus`'s suite (its `suite` config, only `ops` when given) with `code`'s
    gpuemu_ci: (wall seconds, results.json)."""
    return quick_suite(code, corpus / suite, seed, jobs, out, ops)


def prefixed(config: Path, prefix: str) -> tuple[str, ...]:
    """The names of the config's ops that start with `prefix`."""
    import tomllib

    ops = tomllib.loads(config.read_text()).get("ops", [])
    return tuple(op["name"] for op in ops if str(op.get("name", "")).startswith(prefix))


def profile(results: dict) -> str | None:
    """The time split of a results document (None for a revision that did not record one)."""
    from gpuemu_ci.render.timings import profile_rows
    from gpuemu_ci.results.timings import OpTimings

    if not any(op.get("timings") for op in results["ops"]):
        return None
    rows = [(op["name"], OpTimings(**op["timings"]) if op.get("timings") else None) for op in results["ops"]]
    return profile_rows(rows, results["summary"]["duration_s"])


LAST_CPU = [0.0]  # CPU seconds of the last quick_suite run, its workers included


def _children_cpu() -> float:
    """User + system seconds of the reaped child processes (a worker's are counted when its parent reaps it)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def quick_suite(
    code: Path, config: Path, seed: int, jobs: int | None, out: Path, ops: tuple[str, ...] = ()
) -> tuple[float, dict]:
    """One quick-suite run of `config` (only `ops` when given) with `code`'s gpuemu_ci, lint off:
    (wall seconds, results.json). Shared with bench_quick_triton.py."""
    env = dict(os.environ, PYTHONPATH=str(code), GPUEMU_USER_CONFIG="none")
    command = [
        sys.executable, "-m", "gpuemu_ci", "run", "--config", str(config), "--suite", "quick",
        "--seed", str(seed), "--out", str(out), "--no-lint", *[a for name in ops for a in ("--op", name)],
        *(["--jobs", str(jobs)] if jobs else []),
    ]  # fmt: skip
    started = time.monotonic()
    cpu_before = _children_cpu()
    # cwd is the code's tree: `python -m` puts the working directory first on sys.path.
    done = subprocess.run(command, cwd=code, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    LAST_CPU[0] = _children_cpu() - cpu_before
    results = out / "results.json"
    if done.returncode not in (0, 1) or not results.is_file():
        raise RuntimeError(f"{code} on {config}: gpuemu-ci exited {done.returncode}:\n{done.stderr[-2000:]}")
    return wall, json.loads(results.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--before", required=True, help="the earlier revision (a branch, tag or commit)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each side (default 3)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, help="passed to gpuemu-ci run --jobs (default: the corpus's)")
    parser.add_argument("--target", type=float, default=2.0, help="the largest acceptable ratio")
    parser.add_argument(
        "--config", default=CORPUS, help=f"the suite, a path inside each tree (default {CORPUS})"
    )
    parser.add_argument("--op", action="append", default=[], help="only this op (repeatable)")
    parser.add_argument("--op-prefix", help="only the ops whose names start with this (e.g. liger_)")
    parser.add_argument(
        "--no-cross", action="store_true", help="leave out the third side (this code on the earlier suite)"
    )
    parser.add_argument(
        "--suite-here",
        action="store_true",
        help="both sides run this checkout's suite (one the earlier revision does not have: bench/gems_style)",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-quick-") as scratch:
        before = Path(scratch) / "before"
        try:
            extract(args.before, before)
        except ValueError as exc:
            print(f"bench_quick_wall: {exc}", file=sys.stderr)
            return 2
        # side: (code, corpus)
        sides = {
            "before": (before, before),
            "after": (REPO, REPO),
            "after-code-before-corpus": (REPO, before),
        }
        if args.suite_here:
            sides = {"before": (before, REPO), "after": (REPO, REPO)}
        elif args.no_cross:
            del sides["after-code-before-corpus"]
        ops = tuple(args.op) + (prefixed(REPO / args.config, args.op_prefix) if args.op_prefix else ())
        walls: dict[str, list[float]] = {side: [] for side in sides}
        cpus: dict[str, list[float]] = {side: [] for side in sides}
        cases: dict[str, int] = {}
        last: dict[str, dict] = {}
        for run in range(args.runs):
            for side, (code, corpus) in sides.items():
                out = Path(scratch) / f"{side}-{run}"
                wall, results = run_quick(code, corpus, args.seed, args.jobs, out, args.config, ops)
                walls[side].append(wall)
                cpus[side].append(LAST_CPU[0])
                cases[side] = int(results["summary"]["cases_total"])
                last[side] = results
                print(
                    f"run {run + 1} {side:<24} {wall:6.1f} s  cpu {LAST_CPU[0]:6.1f} s  {cases[side]} cases",
                    flush=True,
                )
    medians = {side: statistics.median(values) for side, values in walls.items()}
    cpu = {side: statistics.median(values) for side, values in cpus.items()}
    ratio = medians["after"] / medians["before"]
    for side in sides:
        per_case = 1000 * medians[side] / max(cases[side], 1)
        print(
            f"median {side:<24} {medians[side]:6.1f} s  cpu {cpu[side]:6.1f} s  {cases[side]} cases  "
            f"{per_case:.1f} ms/case"
        )
    # CPU seconds (every process of the run) move far less than wall time with the machine's load.
    print(f"cpu ratio after / before: {cpu['after'] / max(cpu['before'], 1e-9):.2f}")
    if cases["after"] != cases["before"]:
        print(f"note: the sides ran different cases ({cases['before']} before, {cases['after']} after)")
    print(f"ratio after / before: {ratio:.2f} (target <= {args.target:g})")
    if "after-code-before-corpus" in sides:
        same_corpus = medians["after-code-before-corpus"] / medians["before"]
        print(f"ratio on the earlier corpus, this code / earlier code: {same_corpus:.2f}")
    split = profile(last["after"])
    if split is not None:
        print("where the last 'after' run's time went (seconds, summed over the workers):")
        print(split)
    return 0 if ratio <= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
