"""Scores gpuemu-ci's false alarms on PyTorch's own CPU kernels (bench/torch_controls/gpuemu.toml), taken as
correct: every flagged case is a false alarm, except those matching a defect of torch's kernel listed with its
evidence in bench/torch_controls/known_defects.toml (counted and printed apart, never silently).

For every master seed it runs `python3 -m gpuemu_ci run --suite quick --seed S` over the controls as a real
subprocess (PYTHONPATH = the root of this checkout) and prints:
- per op and dtype: flagged cases / cases over all seeds, the worst headroom of the forward and of each gradient;
- per family: the worst headroom (forward and gradients) over every op, dtype and seed;
- the one-shape allclose baseline on the same controls (bench/corpus/oneshape_baseline.py, KernelBench's
  tolerances, 5 trials per dtype at the benchmark shape): how many (op, dtype, seed) it flags;
- with `--corpora`, the bug corpus's and the field evaluation's totals next to them (bench/corpus_score.py and
  bench/field_score.py run over the same seeds), so a looser bound shows what it costs in detection.

    nice python bench/torch_controls_score.py                  # 5 seeds, quick suite
    nice python bench/torch_controls_score.py --seeds 1 --only softmax --only rms_norm
    python bench/torch_controls_score.py --results DIR         # re-score saved runs (DIR/seed-S/results.json)

Exit status: 0 when no control was falsely flagged on any seed; 1 otherwise; 2 for a bad argument or config; 3 when
gpuemu-ci could not run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_CONFIG = HERE / "torch_controls" / "gpuemu.toml"
KNOWN_DEFECTS = HERE / "torch_controls" / "known_defects.toml"


@dataclass(frozen=True, eq=False)  # compared by identity: one entry of the file each
class Defect:
    """A flag on torch's kernel that is a defect of the kernel (known_defects.toml), with what shows it."""

    op: str
    dtype: str
    kind: str
    what: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    layout: dict[str, str] = field(default_factory=dict)
    message: str = ""
    pattern: str = ""  # a regular expression the first message line must match (what the kernel got)

    def matches(self, op: str, failure: dict[str, Any]) -> bool:
        layouts = failure.get("layouts") or {}
        kwargs = failure.get("kwargs") or {}
        first_line = (failure.get("message", "").splitlines() or [""])[0]
        return (
            op == self.op
            and failure.get("dtype") == self.dtype
            and failure.get("kind") == self.kind
            and all(kwargs.get(k) == v for k, v in self.kwargs.items())
            and all(layouts.get(k) == v for k, v in self.layout.items())
            and self.message in first_line
            and (not self.pattern or re.search(self.pattern, first_line) is not None)
        )


def load_defects(path: Path) -> list[Defect]:
    if not path.is_file():
        return []
    entries = tomllib.loads(path.read_text()).get("defect", [])
    return [Defect(**{k: v.strip() if isinstance(v, str) else v for k, v in e.items()}) for e in entries]


@dataclass
class Cell:
    """One op x dtype over every seed."""

    flagged: int = 0
    defects: int = 0  # of the flagged: cases matching a known defect of torch's kernel
    total: int = 0
    headroom: float = 0.0
    grads: dict[str, float] = field(default_factory=dict)  # "grad of x (bound)" -> worst headroom
    first_failure: str = ""
    baseline_flagged: int = 0
    baseline_total: int = 0


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def run_gpuemu(config: Path, seed: int, suite: str, out_dir: Path, names: Sequence[str]) -> dict[str, Any]:
    command = [sys.executable, "-m", "gpuemu_ci", "run", "--config", str(config), "--suite", suite]
    command += ["--seed", str(seed), "--out", str(out_dir), *[a for n in names for a in ("--op", n)]]
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=_environment())
    results = out_dir / "results.json"
    if done.returncode not in (0, 1) or not results.is_file():
        raise RuntimeError(f"gpuemu-ci exited {done.returncode} for seed {seed}:\n{done.stderr[-3000:]}")
    return json.loads(results.read_text())


def collect(
    document: dict[str, Any],
    cells: dict[tuple[str, str], Cell],
    families: dict[str, str],
    defects: Sequence[Defect] = (),
    seen: dict[Defect, int] | None = None,
) -> list[str]:
    """Adds one seed's results to the cells; returns the ops that did not run (errors, skips). A failure that
    matches a known defect is counted in its cell's `defects` (and in `seen`); failures left out of results.json
    (`failures_omitted`) cannot be matched and stay false alarms."""
    problems = []
    for op in document["ops"]:
        families[op["name"]] = op.get("family") or "-"
        if op["status"] not in ("passed", "failed"):
            problems.append(f"{op['name']}: {op['status']}: {op.get('message')}")
        for row in op.get("dtypes", []):
            cell = cells.setdefault((op["name"], row["dtype"]), Cell())
            cell.flagged += row.get("cases_failed", 0) + row.get("cases_errored", 0)
            cell.total += row.get("cases_total", 0)
            cell.headroom = max(cell.headroom, row.get("worst_headroom") or 0.0)
            for g in row.get("gradients", []):
                key = f"grad of {g['of']} ({g['rule']})"
                cell.grads[key] = max(cell.grads.get(key, 0.0), g.get("worst_headroom") or 0.0)
        for failure in op.get("failures", []):
            cell = cells.setdefault((op["name"], failure["dtype"]), Cell())
            defect = next((d for d in defects if d.matches(op["name"], failure)), None)
            if defect is not None:
                cell.defects += 1
                if seen is not None:
                    seen[defect] = seen.get(defect, 0) + 1
                continue
            if not cell.first_failure:
                message = failure["message"].splitlines()[0][:220]
                cell.first_failure = (
                    f"{failure['kind']} {failure['distribution']} {failure['shapes']} "
                    f"seed {failure['case_seed']}: {message}"
                )
    return problems


def baseline(
    config: Path, cells: dict[tuple[str, str], Cell], seeds: Sequence[int], only: Sequence[str]
) -> None:
    """The one-shape allclose baseline (bench/corpus/oneshape_baseline.py) on every op and dtype."""
    sys.path.insert(0, str(HERE / "corpus"))
    sys.path.insert(0, str(config.parent))
    from oneshape_baseline import judge_entry

    from gpuemu_ci.config.load import load_config

    for spec in load_config(config).ops:
        if only and spec.name not in only:
            continue
        for dtype in spec.dtypes:
            for seed in seeds:
                cell = cells.setdefault((spec.name, dtype), Cell())
                cell.baseline_total += 1
                cell.baseline_flagged += judge_entry(spec, (dtype,), seed).caught


def corpora_totals(seeds: Sequence[int], scratch: Path) -> list[str]:
    """The bug corpus's and the field evaluation's totals over the same seeds (each script's own summary)."""
    lines = []
    first, count = str(seeds[0]), str(len(seeds))
    for script, wanted in (
        (
            "corpus_score.py",
            ("bugs caught", "buggy entries caught", "correct kernels falsely flagged", "target"),
        ),
        ("field_score.py", ("caught", "false alarm", "flagged", "target", "missed")),
    ):
        done = subprocess.run(
            [sys.executable, str(HERE / script), "--seeds", count, "--first-seed", first],
            capture_output=True,
            text=True,
            check=False,
            env=_environment(),
            cwd=scratch,
        )
        kept = [line.rstrip() for line in done.stdout.splitlines() if any(w in line for w in wanted)]
        lines.append(f"{script} (exit {done.returncode}):")
        lines.extend(f"  {line}" for line in kept[-8:])
    return lines


def _short(key: str) -> str:
    """'grad of x (bound)' -> 'x'."""
    return re.sub(r" \(.*\)", "", key).removeprefix("grad of ")


def _sort_key(dtype: str) -> int:
    order = ("float32", "float16", "bfloat16", "float64")
    return order.index(dtype) if dtype in order else len(order)


def report(
    cells: dict[tuple[str, str], Cell],
    families: dict[str, str],
    seeds: Sequence[int],
    with_baseline: bool,
    seen: dict[Defect, int] | None = None,
    defects: Sequence[Defect] = (),
) -> bool:
    print(
        f"\nPyTorch CPU kernels as controls: {len(families)} ops, master seeds {', '.join(map(str, seeds))}\n"
    )
    header = f"{'op':<18} {'dtype':<9} {'flagged':>9} {'headroom':>9}  {'gradients (worst headroom)':<44}"
    if with_baseline:
        header += f" {'one-shape':>9}"
    print(header)
    print("-" * len(header))
    flagged = total = b_flagged = b_total = real = 0
    for (name, dtype), cell in sorted(cells.items(), key=lambda kv: (kv[0][0], _sort_key(kv[0][1]))):
        grads = ", ".join(f"{_short(k)} {v:.3g}" for k, v in sorted(cell.grads.items()))
        counted = f"{cell.flagged}/{cell.total}" + (f" ({cell.defects} defect)" if cell.defects else "")
        line = f"{name:<18} {dtype:<9} {counted:>9} {cell.headroom:>9.3g}  {grads:<44}"
        if with_baseline:
            line += f" {f'{cell.baseline_flagged}/{cell.baseline_total}':>9}"
        print(line)
        flagged += cell.flagged
        real += cell.defects
        total += cell.total
        b_flagged += cell.baseline_flagged
        b_total += cell.baseline_total
    print("-" * len(header))
    print(f"{'cases flagged':<29} {f'{flagged}/{total}':>9}")
    print(f"{'  defects of torch kernels':<29} {real:>9}  (bench/torch_controls/known_defects.toml)")
    print(f"{'  false alarms':<29} {f'{flagged - real}/{total}':>9}")
    if with_baseline:
        print(f"{'one-shape allclose: (op, dtype, seed) flagged':<46} {b_flagged}/{b_total}")

    print(f"\n{'family':<12} {'worst forward headroom':<34} {'worst gradient headroom':<34}")
    for family in sorted(set(families.values())):
        members = [(k, c) for k, c in cells.items() if families.get(k[0]) == family]
        fwd = max(members, key=lambda kc: kc[1].headroom, default=None)
        grad = max(
            ((k, g, v) for k, c in members for g, v in c.grads.items()), key=lambda kgv: kgv[2], default=None
        )
        fwd_text = f"{fwd[1].headroom:.3g} ({fwd[0][0]} {fwd[0][1]})" if fwd else "-"
        grad_text = f"{grad[2]:.3g} ({grad[0][0]} {grad[0][1]})" if grad else "-"
        print(f"{family:<12} {fwd_text:<34} {grad_text:<34}")

    failing = [(k, c) for k, c in sorted(cells.items()) if c.flagged > c.defects]
    if failing:
        print("\nfalse alarms (first per op and dtype):")
        for (name, dtype), cell in failing:
            print(f"  {name} [{dtype}] {cell.flagged - cell.defects}/{cell.total}: {cell.first_failure}")
    if defects:
        print("\ndefects of torch's kernels (known_defects.toml), cases matched over these seeds:")
        for defect in defects:
            count = (seen or {}).get(defect, 0)
            where = f"{defect.op} [{defect.dtype}] {defect.kind}"
            print(f"  {where}: {count}" + ("" if count else " (matched nothing: fixed, or not reached)"))
            print("    " + " ".join(defect.what.split()))
    met = flagged == real
    print(f"\ntarget (no PyTorch kernel falsely flagged on any seed): {'MET' if met else 'NOT MET'}")
    return met


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--suite", choices=("quick", "thorough"), default="quick")
    parser.add_argument("--seeds", type=int, default=5, help="how many master seeds (default 5)")
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--only", action="append", default=[], help="only this op (repeatable)")
    parser.add_argument("--out", type=Path, help="keep each seed's results in OUT/seed-S")
    parser.add_argument("--results", type=Path, help="re-score saved runs RESULTS/seed-S/results.json")
    parser.add_argument("--no-baseline", action="store_true", help="skip the one-shape allclose baseline")
    parser.add_argument("--corpora", action="store_true", help="also run corpus_score.py and field_score.py")
    parser.add_argument("--json", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.first_seed < 0:
        parser.error("--seeds must be >= 1 and --first-seed >= 0")
    config = args.config.resolve()
    if not config.is_file():
        print(f"torch_controls_score: no {config}", file=sys.stderr)
        return 2
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    cells: dict[tuple[str, str], Cell] = {}
    families: dict[str, str] = {}
    problems: list[str] = []
    defects = load_defects(KNOWN_DEFECTS) if config == DEFAULT_CONFIG.resolve() else []
    seen: dict[Defect, int] = {}
    with tempfile.TemporaryDirectory(prefix="torch-controls-") as scratch:
        out_root = args.out.resolve() if args.out else Path(scratch)
        for seed in seeds:
            if args.results:
                path = args.results / f"seed-{seed}" / "results.json"
                if not path.is_file():
                    print(f"torch_controls_score: no {path}", file=sys.stderr)
                    return 2
                document = json.loads(path.read_text())
            else:
                started = time.monotonic()
                try:
                    document = run_gpuemu(config, seed, args.suite, out_root / f"seed-{seed}", args.only)
                except RuntimeError as exc:
                    print(f"torch_controls_score: {exc}", file=sys.stderr)
                    return 3
                print(f"seed {seed}: {time.monotonic() - started:.0f} s", file=sys.stderr)
            problems += [f"seed {seed}: {p}" for p in collect(document, cells, families, defects, seen)]
        if not args.no_baseline:
            baseline(config, cells, seeds, args.only)
        met = report(cells, families, seeds, not args.no_baseline, seen, defects)
        for problem in problems:
            print(f"  NOT RUN {problem}")
        if args.corpora:
            print("\nBug corpora over the same seeds:")
            print("\n".join(corpora_totals(seeds, Path(scratch))))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "seeds": seeds,
                    "cells": [
                        {"op": k[0], "dtype": k[1], "family": families.get(k[0]), **vars(c)}
                        for k, c in sorted(cells.items())
                    ],
                },
                indent=2,
            )
            + "\n"
        )
    return 0 if met and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
