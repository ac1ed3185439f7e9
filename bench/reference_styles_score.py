"""Compares gpuemu-ci's verdicts with references written two ways (issue #44): as the config's author wrote them
(the benches' references compute in the dtype of their inputs) and upcast to float64 on entry
(`bench/reference_styles.py`: the same functions, every float input cast to float64 first, what
`x.astype(np.float64)` or `x.double()` at the top of a reference does). The verdicts must be the same.

For every master seed it runs `python3 -m gpuemu_ci run --suite quick --seed S` over the config once per style
(real subprocesses) and prints, per op, the failed cases of each style and the cases whose verdict differs (with
the first line of the failure), then totals.

    nice python bench/reference_styles_score.py --config bench/corpus/gpuemu.toml --seeds 1
    nice python bench/reference_styles_score.py --config bench/torch_controls/gpuemu.toml --first-seed 11
    python bench/reference_styles_score.py --config bench/field/gpuemu.toml --only rope_fp32_angles.control

Exit status: 0 when every op gets the same verdict on every seed both ways; 1 otherwise; 2 for a bad argument;
3 when gpuemu-ci could not run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import reference_styles

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


@dataclass
class OpTally:
    """One op over every seed, per style: failed cases (seed -> case seeds) and their first message lines."""

    failed: dict[str, set[tuple[int, int]]] = field(default_factory=dict)
    total: dict[str, int] = field(default_factory=dict)
    messages: dict[tuple[str, int, int], str] = field(default_factory=dict)
    status: dict[tuple[str, int], str] = field(default_factory=dict)  # (style, seed) -> passed / failed
    counts: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)  # failed cases per dtype
    incomplete: bool = False  # results.json left some failures out: compared by counts only


def run_style(
    style: str, config: Path, seed: int, suite: str, out_dir: Path, only: Sequence[str], jobs: int | None
) -> dict[str, Any]:
    path = reference_styles.config_for(style, config)
    try:
        command = [sys.executable, "-m", "gpuemu_ci", "run", "--config", str(path), "--suite", suite]
        command += ["--seed", str(seed), "--out", str(out_dir), *[a for n in only for a in ("--op", n)]]
        if jobs:
            command += ["--jobs", str(jobs)]
        env = reference_styles.environment()
        env["PYTHONPATH"] = f"{ROOT}:{env['PYTHONPATH']}"
        done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    finally:
        reference_styles.remove_config(style, path)
    results = out_dir / "results.json"
    if done.returncode not in (0, 1) or not results.is_file():
        raise RuntimeError(
            f"gpuemu-ci ({style}) exited {done.returncode} for seed {seed}:\n{done.stderr[-3000:]}"
        )
    document: dict[str, Any] = json.loads(results.read_text())
    return document


def collect(style: str, seed: int, document: dict[str, Any], tallies: dict[str, OpTally]) -> list[str]:
    """Adds one run to the tallies; returns what could not be compared (ops not run, failures left out)."""
    problems = []
    for op in document["ops"]:
        tally = tallies.setdefault(op["name"], OpTally())
        if op["status"] not in ("passed", "failed"):
            problems.append(f"{style} seed {seed}: {op['name']}: {op['status']}: {op.get('message')}")
        rows = op.get("dtypes", [])
        tally.total[style] = tally.total.get(style, 0) + sum(r.get("cases_total", 0) for r in rows)
        tally.status[(style, seed)] = op["status"]
        tally.counts[(style, seed)] = tuple(
            r.get("cases_failed", 0) + r.get("cases_errored", 0) for r in rows
        )
        failed = tally.failed.setdefault(style, set())
        for failure in op.get("failures", []):
            key = (seed, int(failure["case_seed"]))
            failed.add(key)
            first = (failure.get("message", "").splitlines() or [""])[0][:200]
            what = f"{failure['kind']}{' of ' + failure['output'] if failure.get('output') else ''}"
            tally.messages[(style, *key)] = f"{failure['dtype']} {failure['distribution']} {what}: {first}"
        if op.get("failures_omitted"):
            tally.incomplete = True
    return problems


def report(tallies: dict[str, OpTally], seeds: Sequence[int]) -> bool:
    a, b = reference_styles.STYLES
    print(f"\nreferences as written against upcast to float64, master seeds {', '.join(map(str, seeds))}\n")
    header = f"{'op':<48} {a:>12} {b:>12}  verdict  differing cases"
    print(header)
    print("-" * len(header))
    differing_ops = 0
    differing_cases = 0
    details = []
    for name, tally in sorted(tallies.items()):
        first, second = tally.failed.get(a, set()), tally.failed.get(b, set())
        differ = first ^ second
        failed = [sum(sum(c) for (s, _), c in tally.counts.items() if s == style) for style in (a, b)]
        counted = [f"{failed[i]}/{tally.total.get(s, 0)}" for i, s in enumerate((a, b))]
        verdicts = {seed: [tally.status.get((s, seed)) for s in (a, b)] for seed in seeds}
        same_verdict = all(x == y for x, y in verdicts.values())
        same_counts = all(tally.counts.get((a, seed)) == tally.counts.get((b, seed)) for seed in seeds)
        shown = (
            ""
            if not differ
            else str(len(differ))
            if not tally.incomplete
            else f"{len(differ)}+ (some unlisted)"
        )
        print(
            f"{name:<48} {counted[0]:>12} {counted[1]:>12}  {'same' if same_verdict else 'DIFFER':<7}  {shown}"
        )
        if not same_verdict:
            differing_ops += 1
        if differ or not same_counts:
            differing_cases += max(len(differ), 1)
            for seed, case_seed in sorted(differ)[:3]:
                style = a if (seed, case_seed) in first else b
                details.append(
                    f"  {name} seed {seed} case {case_seed}: fails only {style}: "
                    f"{tally.messages.get((style, seed, case_seed), '')}"
                )
    print("-" * len(header))
    print(f"ops whose verdict differs on some seed: {differing_ops} of {len(tallies)}")
    print(
        f"cases whose verdict differs (listed failures; counts where results.json left some out): {differing_cases}"
    )
    if details:
        print("\nfirst differing cases per op:")
        print("\n".join(details))
    same = differing_ops == 0
    print(f"\ntarget (the same verdict for every op on every seed both ways): {'MET' if same else 'NOT MET'}")
    return same


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--suite", choices=("quick", "thorough"), default="quick")
    parser.add_argument("--seeds", type=int, default=1, help="how many master seeds (default 1)")
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--only", action="append", default=[], help="only this op (repeatable)")
    parser.add_argument("--jobs", type=int, help="gpuemu-ci's --jobs")
    parser.add_argument("--out", type=Path, help="keep each run's results in OUT/<style>/seed-S")
    parser.add_argument(
        "--results", type=Path, help="re-score saved runs RESULTS/<style>/seed-S/results.json"
    )
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.first_seed < 0:
        parser.error("--seeds must be >= 1 and --first-seed >= 0")
    config = args.config.resolve()
    if not config.is_file():
        print(f"reference_styles_score: no {config}", file=sys.stderr)
        return 2
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    tallies: dict[str, OpTally] = {}
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="reference-styles-") as scratch:
        out_root = args.out.resolve() if args.out else Path(scratch)
        for seed in seeds:
            for style in reference_styles.STYLES:
                if args.results:
                    saved = args.results / style / f"seed-{seed}" / "results.json"
                    if not saved.is_file():
                        print(f"reference_styles_score: no {saved}", file=sys.stderr)
                        return 2
                    problems += collect(style, seed, json.loads(saved.read_text()), tallies)
                    continue
                started = time.monotonic()
                try:
                    document = run_style(
                        style,
                        config,
                        seed,
                        args.suite,
                        out_root / style / f"seed-{seed}",
                        args.only,
                        args.jobs,
                    )
                except RuntimeError as exc:
                    print(f"reference_styles_score: {exc}", file=sys.stderr)
                    return 3
                print(f"seed {seed} {style}: {time.monotonic() - started:.0f} s", file=sys.stderr)
                problems += collect(style, seed, document, tallies)
    same = report(tallies, seeds)
    for problem in problems:
        print(f"  NOT COMPARED {problem}")
    return 0 if same and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
