"""Proves a change to the oracle left every verdict and every measured figure as it was: runs a fixed workload
(the examples, the torch controls, the bug corpus, the field evaluation's Triton kernels; fixed seeds, quick
suite, no lint) with the gpuemu-ci of a given checkout, and writes or compares a fingerprint of its results.json
files: per op and dtype the status, case counts, worst headroom and largest error of the output and of each
gradient, and per recorded failure its case seed, kind, message and figures (timings, paths and the environment
left out).

    nice python bench/oracle_identity.py --record before.json --root /path/to/the/old/checkout
    nice python bench/oracle_identity.py --compare before.json       # this checkout; exit 1 on any difference

Exit status: 0 when written or identical, 1 when a figure differs, 2 for a bad argument, 3 when gpuemu-ci could
not run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# (name, config relative to the checkout, master seed, extra arguments)
WORKLOAD: tuple[tuple[str, str, int, tuple[str, ...]], ...] = (
    ("quickstart", "examples/quickstart/gpuemu.toml", 7, ()),
    ("buggy", "examples/buggy/gpuemu.toml", 7, ()),
    ("triton", "examples/triton/gpuemu.toml", 7, ()),
    ("triton-buggy", "examples/triton/gpuemu-buggy.toml", 7, ()),
    ("torch-controls-1", "bench/torch_controls/gpuemu.toml", 1, ()),
    ("torch-controls-2", "bench/torch_controls/gpuemu.toml", 2, ()),
    ("corpus-1", "bench/corpus/gpuemu.toml", 1, ()),
    ("field-1", "bench/field/gpuemu.toml", 1, ()),
)

_FAILURE_FIELDS = ("case_id", "case_seed", "dtype", "kind", "message", "comparator", "headroom")
_FAILURE_FIGURES = ("max_abs_error", "worst_index", "exceeded", "total", "errored", "output", "party")
_ROW_FIELDS = ("status", "cases_total", "cases_failed", "cases_errored", "cases_skipped", "skip_reason")
_ROW_FIGURES = ("worst_headroom", "max_abs_error", "comparator", "worst_case", "gradients")


def fingerprint(document: dict[str, Any]) -> dict[str, Any]:
    """What the oracle decided in one results.json, without timings, paths or the machine."""
    ops: dict[str, Any] = {}
    for op in document["ops"]:
        rows = {
            row["dtype"]: {key: row.get(key) for key in (*_ROW_FIELDS, *_ROW_FIGURES)} for row in op["dtypes"]
        }
        failures = [
            {key: failure.get(key) for key in (*_FAILURE_FIELDS, *_FAILURE_FIGURES)}
            for failure in op["failures"]
        ]
        ops[op["name"]] = {
            "status": op["status"],
            "message": op.get("message"),
            "counts": [op["cases_total"], op["cases_passed"], op["cases_failed"], op["cases_errored"]],
            "dtypes": rows,
            "failures": sorted(
                failures, key=lambda f: (str(f["dtype"]), str(f["case_id"]), str(f["output"]))
            ),
            "failures_omitted": op.get("failures_omitted"),
            "triton_notes": op.get("triton_notes"),
        }
    return {"exit_code": document.get("exit_code"), "ops": ops}


def steady(prints: dict[str, Any]) -> dict[str, Any]:
    """The fingerprints with each op whose kernel is nondeterministic (a `nondeterministic` failure: its outputs
    differ between two calls on the same inputs, so its cases' figures differ between two runs of the same
    gpuemu-ci, measured on the corpus's splitk_gemm.bug.nondeterministic: 10 and 11 failed cases) reduced to its
    status, which does not vary."""
    out: dict[str, Any] = {}
    for workload, printed in prints.items():
        ops = {}
        for name, op in printed["ops"].items():
            racy = any(f["kind"] == "nondeterministic" for f in op["failures"])
            ops[name] = {"status": op["status"], "volatile": True} if racy else op
        out[workload] = {**printed, "ops": ops}
    return out


def run_one(root: Path, config: str, seed: int, extra: Sequence[str], out_dir: Path) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    env["PYTHONHASHSEED"] = "0"
    command = [sys.executable, "-m", "gpuemu_ci", "run", "--config", str(root / config), "--suite", "quick"]
    command += ["--seed", str(seed), "--out", str(out_dir), "--no-lint", "--allow-skips", *extra]
    done = subprocess.run(
        command, capture_output=True, text=True, check=False, env=env, cwd=(root / config).parent
    )
    results = out_dir / "results.json"
    if done.returncode not in (0, 1) or not results.is_file():
        raise RuntimeError(f"gpuemu-ci exited {done.returncode} on {config}:\n{done.stderr[-3000:]}")
    return fingerprint(json.loads(results.read_text()))


def measure(root: Path, only: Sequence[str]) -> dict[str, Any]:
    prints: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="oracle-identity-") as scratch:
        for name, config, seed, extra in WORKLOAD:
            if only and name not in only:
                continue
            print(f"oracle_identity: {name} (seed {seed})", file=sys.stderr, flush=True)
            prints[name] = run_one(root, config, seed, extra, Path(scratch) / name)
    return prints


def differences(before: Any, after: Any, where: str = "") -> list[str]:
    """Every path at which two fingerprints differ, with both values."""
    if isinstance(before, dict) and isinstance(after, dict):
        found = []
        for key in sorted(set(before) | set(after)):
            if key not in before or key not in after:
                found.append(f"{where}/{key}: only {'after' if key in after else 'before'}")
            else:
                found += differences(before[key], after[key], f"{where}/{key}")
        return found
    if before != after:
        return [f"{where}: {before!r} -> {after!r}"]
    return []


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--record", type=Path, help="write the fingerprint to this file")
    which.add_argument("--compare", type=Path, help="compare against this recorded fingerprint")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose gpuemu-ci runs")
    parser.add_argument("--only", action="append", default=[], help="only this workload (repeatable)")
    args = parser.parse_args(argv)
    known = {name for name, *_ in WORKLOAD}
    if set(args.only) - known:
        parser.error(f"unknown workload(s) {sorted(set(args.only) - known)}; known: {sorted(known)}")
    try:
        measured = measure(args.root.resolve(), args.only)
    except RuntimeError as exc:
        print(f"oracle_identity: {exc}", file=sys.stderr)
        return 3
    if args.record:
        args.record.write_text(json.dumps(measured, indent=1, sort_keys=True) + "\n")
        cases = sum(sum(op["counts"][0] for op in w["ops"].values()) for w in measured.values())
        print(f"oracle_identity: recorded {len(measured)} workloads, {cases} cases -> {args.record}")
        return 0
    recorded = json.loads(args.compare.read_text())
    if args.only:
        recorded = {name: recorded[name] for name in args.only if name in recorded}
    found = differences(steady(recorded), steady(measured))
    cases = sum(sum(op["counts"][0] for op in w["ops"].values()) for w in measured.values())
    figures = sum(
        2 + 2 * len(row.get("gradients") or ())
        for w in measured.values()
        for op in w["ops"].values()
        for row in op["dtypes"].values()
    )
    volatile = sum(op.get("volatile", False) for w in steady(measured).values() for op in w["ops"].values())
    if found:
        print(f"oracle_identity: {len(found)} difference(s):\n  " + "\n  ".join(found[:200]))
        return 1
    print(
        f"oracle_identity: identical over {len(measured)} workloads, {cases} cases, "
        f"{figures} worst-headroom/error figures ({volatile} nondeterministic op(s) compared by status)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
