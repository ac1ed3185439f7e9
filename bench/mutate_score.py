"""Mutation score of gpuemu-ci's suites next to the one-shape `allclose` baseline's, on the same mutants.

For each config (the Triton example, the corpus's Triton entries, Liger-Kernel's kernels in bench/field) it runs
`gpuemu-ci mutate` as a user would (a subprocess of this checkout), then judges every mutant that gpuemu-ci ran
with the KernelBench-style baseline of bench/corpus/oneshape_baseline.py (5 trials per dtype at the benchmark
shape, allclose), in this process, with the same kernel swapped in memory the same way the workers swap it.
Prints per config: mutants, gpuemu-ci's score, the baseline's, the survivors of each by operator, wall time.
An op that could not be scored (it fails its own suite, or cannot be imported: liger-kernel not installed) is
named on stderr with the reason, and the exit status is 1.

    python bench/mutate_score.py
    python bench/mutate_score.py --liger-ops liger_rms_norm.control --max-mutants 8
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench" / "corpus")]

from gpuemu_ci.backends import mutant as swap  # noqa: E402
from gpuemu_ci.calls import LaunchedKernel  # noqa: E402
from gpuemu_ci.config.load import load_config  # noqa: E402
from gpuemu_ci.mutate.plan import all_mutants, kernel_sources  # noqa: E402
from gpuemu_ci.mutate.triton_operators import OPERATORS  # noqa: E402

CONFIGS = {
    "examples/triton": (REPO / "examples/triton/gpuemu.toml", ["rmsnorm"]),
    "corpus (Triton)": (
        REPO / "bench/corpus/gpuemu.toml",
        ["rmsnorm_triton_bwd.control", "tri_row_max.control", "tri_scale.control", "tri_col_sum.control"],
    ),
}


def run_mutate(
    config: Path, ops: list[str], out: Path, seed: int, extra: list[str], log: Path | None = None
) -> dict[str, Any]:
    command = [sys.executable, "-m", "gpuemu_ci", "mutate", "--config", str(config), "--out", str(out)]
    command += ["--no-cache", "--seed", str(seed), *extra] + [f"--op={op}" for op in ops]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(log or os.devnull, "w") as stderr:  # its progress and its terminal report
        subprocess.run(command, check=False, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    document: dict[str, Any] = json.loads((out / "results.json").read_text())
    return document


def _patch_of(entry: dict[str, Any], root: Path) -> Any:
    """The mutant `entry` names, rebuilt from the kernel this process imported."""
    module_name, _, function = entry["kernel"].rpartition(".")
    module = importlib.import_module(module_name)
    obj = getattr(module, function)
    while not hasattr(getattr(obj, "fn", None), "__code__"):
        obj = obj.fn
    code = obj.fn.__code__
    sources = kernel_sources(
        [LaunchedKernel(module_name, function, code.co_filename, code.co_firstlineno)], root
    )
    found = [m for m in all_mutants(sources, OPERATORS) if m.id == entry["id"]]
    return found[0].patch() if found else None


def baseline_caught(config_path: Path, document: dict[str, Any], seed: int) -> dict[tuple[str, str], bool]:
    from oneshape_baseline import judge_entry

    os.environ.setdefault("TRITON_INTERPRET", "1")
    config = load_config(config_path)
    sys.path.insert(0, str(config.root))
    caught = {}
    for op_mutation in document["mutation"]["ops"]:
        op = next(o for o in config.ops if o.name == op_mutation["op"])
        for entry in op_mutation["mutants"]:
            if entry["status"] not in ("killed", "survived"):
                continue  # an `equivalent?` mutant counts for neither side: its trials would all pass
            patch = _patch_of(entry, config.root)
            if patch is None:
                continue
            swap.prepare((patch,))
            with swap.applied((patch,)):
                try:
                    verdict = judge_entry(op, op.dtypes[:2], seed).caught
                except Exception:
                    verdict = True  # a kernel that raises fails the trial, as in KernelBench
            caught[(op.name, entry["id"])] = verdict
    return caught


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-mutants", type=int, default=None)
    parser.add_argument("--jobs", type=int, default=None, help="gpuemu-ci mutate --jobs")
    parser.add_argument("--budget", type=float, default=None, help="gpuemu-ci mutate --budget (seconds)")
    parser.add_argument(
        "--liger-ops", nargs="*", default=[], help="bench/field ops to add (needs liger-kernel)"
    )
    parser.add_argument("--only", nargs="*", default=None, help="config labels to run")
    parser.add_argument(
        "--keep", type=Path, default=None, help="keep each config's results.json and baseline verdicts here"
    )
    parser.add_argument("--per-op", action="store_true", help="also one row per op (no wall time)")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="with --keep: take gpuemu-ci's documents kept there by an earlier run",
    )
    args = parser.parse_args(argv)
    configs = dict(CONFIGS)
    if args.liger_ops:
        configs["Liger-Kernel (bench/field)"] = (REPO / "bench/field/gpuemu.toml", args.liger_ops)
    options = {"max-mutants": args.max_mutants, "jobs": args.jobs, "budget": args.budget}
    extra = [f"--{name}={value}" for name, value in options.items() if value is not None]
    rows = []
    unscored: list[str] = []  # a row of zeros must not read as a result
    for number, (label, (config, ops)) in enumerate(configs.items()):
        if args.only is not None and label not in args.only:
            continue
        kept = args.keep / f"{number}-results.json" if args.keep is not None else None
        if args.reuse and kept is not None and kept.is_file():
            document = json.loads(kept.read_text())
            wall = float(document["mutation"]["duration_s"])  # mutate's own figure
        else:
            with tempfile.TemporaryDirectory() as out:
                started = time.monotonic()
                log = args.keep / f"{number}-mutate.log" if args.keep is not None else None
                if args.keep is not None:
                    args.keep.mkdir(parents=True, exist_ok=True)
                document = run_mutate(config, ops, Path(out), args.seed, extra, log)
                wall = time.monotonic() - started
            if kept is not None:  # before the baseline, which takes its time
                kept.write_text(json.dumps(document, indent=1))
        started = time.monotonic()
        caught = baseline_caught(config, document, args.seed)
        baseline_wall = time.monotonic() - started
        if args.keep is not None:
            verdicts = [{"op": op, "id": mutant, "caught": c} for (op, mutant), c in sorted(caught.items())]
            (args.keep / f"{number}-allclose.json").write_text(json.dumps(verdicts, indent=1))
        rows.append(_row(label, document, caught, wall, baseline_wall))
        unscored += [
            f"{label}: {op['op']}: {op.get('message') or 'not scored'}"
            for op in document["mutation"]["ops"]
            if op.get("score") is None and not op.get("lint_only_because")
        ]
        if args.per_op:
            rows += [_row(f"  {op['op']}", _only(document, op), caught) for op in document["mutation"]["ops"]]
    print(
        "| suite | mutants | equivalent? | errored, not run | gpuemu-ci killed | one-shape allclose caught "
        "| gpuemu-ci survivors | allclose misses by operator | wall (gpuemu-ci; allclose) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(row)
    for line in unscored:
        print(line, file=sys.stderr)
    return 1 if unscored else 0


def _only(document: dict[str, Any], op: dict[str, Any]) -> dict[str, Any]:
    """The document with one op's mutants only."""
    return {**document, "mutation": {**document["mutation"], "ops": [op]}}


def _row(
    label: str,
    document: dict[str, Any],
    caught: dict[tuple[str, str], bool],
    wall: float | None = None,
    baseline: float | None = None,
) -> str:
    """One line of the table: gpuemu-ci's verdicts and the baseline's on the mutants gpuemu-ci decided."""
    entries = [(op["op"], m) for op in document["mutation"]["ops"] for m in op["mutants"]]
    statuses = Counter(m["status"] for _, m in entries)
    judged = [(op, m) for op, m in entries if m["status"] in ("killed", "survived")]
    theirs = sum(caught.get((op, m["id"]), False) for op, m in judged)
    survivors = Counter(m["operator"] for _, m in judged if m["status"] == "survived")
    missed = Counter(m["operator"] for op, m in judged if not caught.get((op, m["id"]), False))

    def listed(counts: Counter[str]) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"

    return (
        f"| {label} | {len(entries)} | {statuses['equivalent?']} | "
        f"{statuses['errored']}, {statuses['not run']} | {statuses['killed']}/{len(judged)} | "
        f"{theirs}/{len(judged)} | {listed(survivors)} | {listed(missed)} | "
        + (f"{wall:.0f} s; {baseline:.0f} s |" if wall is not None and baseline is not None else "|")
    )


if __name__ == "__main__":
    sys.exit(main())
