"""Scores gpuemu-ci on the field evaluation (bench/field/gpuemu.toml): third-party Liger-Kernel Triton kernels run
under Triton's CPU interpreter and tiled NumPy emulations of GPU kernels, each correct kernel next to
few-line mutants with realistic bugs, configured as a user following the README would.

For every master seed it runs `python3 -m gpuemu_ci run --suite quick --seed S` over the whole config as a real
subprocess (PYTHONPATH = the root of the checkout this script lives in, so it tests that checkout's gpuemu-ci),
reads results.json and prints:
- per bug class, per seed, whether each mutant was caught: `X` caught on a case its correct kernel passes,
  `c` caught only on cases where the correct kernel fails too (nothing learnt about the bug), `.` missed;
- per correct kernel, every false alarm: dtype, shapes, layouts, kwargs, failure kind and message.

Entry names: `<kernel>.control` (correct: any failure is a false alarm), `<kernel>.bug.<class>` (a mutant of it:
must fail) and `<kernel>.upstream.<class>` (a third-party kernel as shipped, with a real defect of that class
found while building this harness: it must fail, and it stands in for the control of its mutants).

    python bench/field_score.py                       # 5 seeds, quick suite (about 25 min on 2 cores)
    python bench/field_score.py --suite thorough --only softmax_online --seeds 1
    python bench/field_score.py --results DIR         # re-score saved runs (DIR/seed-S/results.json)

Exit status: 0 when every mutant was caught on every seed and no correct kernel was flagged; 1 otherwise;
2 for a bad argument or config; 3 when gpuemu-ci could not run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
DEFAULT_CONFIG = HERE / "field" / "gpuemu.toml"

# Bug classes of the field mutants: what the bug is, and what an input needs for it to show.
BUG_CLASSES: dict[str, str] = {
    "mask_other_zero": "masked lanes / padding load 0, not the identity (-inf): N % BLOCK != 0 or padding > 0",
    "acc_assign": "block accumulator `=` instead of `+=`: a row longer than one block",
    "max_init_zero": "running max starts at 0, not -inf: every value of a row far below 0",
    "eps_ignored": "eps never added: rows whose mean square / variance is ~0",
    "half_precision_accumulation": "accumulator or split-K partials in the 16-bit input dtype",
    "truncating_bf16_store": "fp32 -> bf16 store truncates instead of rounding (a bias, not an error)",
    "sumsq_low_precision": "sum of squares kept in bf16 (fp32 inputs too)",
    "bias_wrong_axis": "bias indexed by the row / position instead of the column / channel",
    "row_stride_n": "row stride taken as N: rows padded in memory (x[:, :N] with unit inner stride)",
    "conv_halo": "tile loads no KW - 1 halo: L_out > tile (128) and KW > stride",
    "int32_offset_overflow": "element offsets in int32: tensors past 2^31 elements",
    "one_pass_variance": "E[x^2] - E[x]^2: |mean| >> std",
    "kwarg_ignored": "a kwarg (position offset, label smoothing, correction) never used",
    "angles_low_precision": "RoPE positions / angles in the 16-bit input dtype",
    "tie_break": "argmax keeps the last of equal maxima across blocks (`>=`)",
    "wrong_operand": "k normalised with q's weight (copy-paste)",
    "wrong_affine_index": "group-norm weight indexed by group, not channel",
    "partial_rotary_offset": "second rotary half located at head_dim / 2, not rotary_dim / 2: partial RoPE",
    "size1_stride": "rows stepped with the stride of a size-1 dim: [B, H, 1, D]-contiguous inputs, B > 1",
}
BASELINE_ROLES = ("control", "upstream")  # what a mutant is compared with
MAX_LISTED = 6  # false alarms listed per control and seed


@dataclass(frozen=True)
class Entry:
    name: str  # <kernel>.control or <kernel>.bug.<class>
    kernel: str
    role: str
    bug_class: str  # "" for controls


@dataclass
class Verdict:
    """One entry on one seed."""

    status: str  # passed | failed | error | skipped ...
    failed_seeds: frozenset[int]  # case seeds of the recorded failures
    complete: bool  # every failing case is recorded (failures_omitted == 0)
    cases_failed: int
    cases_total: int
    interpreter: str | None
    failed_by_dtype: dict[str, int] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    message: str | None = None


def parse_entries(config_path: Path) -> list[Entry]:
    ops = tomllib.loads(config_path.read_text()).get("ops", [])
    entries = []
    for op in ops:
        name = str(op["name"])
        parts = name.split(".")
        if len(parts) == 2 and parts[1] == "control":
            entries.append(Entry(name, parts[0], "control", ""))
        elif len(parts) == 3 and parts[1] in ("bug", "upstream") and parts[2] in BUG_CLASSES:
            entries.append(Entry(name, parts[0], parts[1], parts[2]))
        else:
            raise ValueError(
                f"entry {name!r}: expected <kernel>.control, <kernel>.bug.<class> or <kernel>.upstream.<class>"
            )
    kernels = {e.kernel for e in entries}
    baselines = Counter(e.kernel for e in entries if e.role in BASELINE_ROLES)
    wrong = sorted(k for k in kernels if baselines[k] != 1)
    if wrong:
        raise ValueError(f"kernels without exactly one .control or .upstream entry: {', '.join(wrong)}")
    return entries


def run_gpuemu(
    config: Path, seed: int, suite: str, out_dir: Path, names: Sequence[str], dtypes: Sequence[str]
) -> dict[str, Any]:
    """One gpuemu-ci run as a user runs it; returns its results.json."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    command = [
        sys.executable, "-m", "gpuemu_ci", "run",
        "--config", str(config), "--suite", suite, "--seed", str(seed), "--out", str(out_dir), "--jobs", "1",
        *[arg for n in names for arg in ("--op", n)],
        *[arg for d in dtypes for arg in ("--dtype", d)],
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    results = out_dir / "results.json"
    document = json.loads(results.read_text()) if results.is_file() else None
    if document is not None and done.returncode == 3 and document.get("cut_short"):
        # The suite timeout (ci.thorough_timeout) expired: score the cases that ran, and say so.
        print(f"seed {seed}: cut short by the suite timeout; scoring the cases that ran", file=sys.stderr)
        return document
    if done.returncode not in (0, 1) or document is None:
        raise RuntimeError(f"gpuemu-ci exited {done.returncode} for seed {seed}:\n{done.stderr[-3000:]}")
    return document


# Triton's interpreter computes bfloat16 on bit patterns (FINDINGS.md F1): its bf16 cases measure the
# interpreter, not the kernel or gpuemu-ci, and issue #15 (item 6) makes gpuemu-ci judge or skip them. They are
# left out of the score unless --count-interpreter-bf16.
INTERPRETER_EXCLUDED = ("bfloat16",)


def verdicts_of(document: dict[str, Any], exclude_interpreter_bf16: bool = True) -> dict[str, Verdict]:
    out = {}
    for op in document["ops"]:
        failures = list(op.get("failures", []))
        rows = list(op.get("dtypes", []))
        status = op["status"]
        interpreted = bool(op.get("interpreter"))
        if exclude_interpreter_bf16 and interpreted and status in ("passed", "failed"):
            failures = [f for f in failures if f["dtype"] not in INTERPRETER_EXCLUDED]
            rows = [d for d in rows if d["dtype"] not in INTERPRETER_EXCLUDED]
            status = "failed" if any(int(d.get("cases_failed", 0)) for d in rows) else "passed"
        out[op["name"]] = Verdict(
            status=status,
            failed_seeds=frozenset(int(f["case_seed"]) for f in failures),
            complete=not op.get("failures_omitted"),
            cases_failed=sum(int(d.get("cases_failed", 0)) for d in rows)
            if rows
            else int(op.get("cases_failed", 0)),
            cases_total=sum(int(d.get("cases_total", 0)) for d in rows)
            if rows
            else int(op.get("cases_total", 0)),
            interpreter=op.get("interpreter"),
            failed_by_dtype={d["dtype"]: int(d.get("cases_failed", 0)) for d in rows},
            failures=failures,
            message=op.get("message"),
        )
    return out


def bug_mark(bug: Verdict, control: Verdict | None) -> str:
    """X: caught on a case the correct kernel passes; c: caught only where it fails too; .: missed; E: error."""
    if bug.status not in ("passed", "failed"):
        return "E"
    if bug.status != "failed":
        return "."
    if control is None or control.status != "failed":
        return "X"
    if bug.failed_seeds - control.failed_seeds:
        return "X"
    # Every recorded failure of the mutant is a case where the correct kernel fails too.
    return "c" if control.complete else "?"


def _baseline(run: dict[str, Verdict], entry: Entry, baseline_of: dict[str, str]) -> Verdict | None:
    """The verdict a mutant is compared with: its kernel's control (or shipped upstream entry); none for those."""
    name = baseline_of.get(entry.kernel)
    return None if name is None or name == entry.name else run.get(name)


def first_line(text: str, width: int = 150) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= width else line[: width - 3] + "..."


def describe_failure(f: dict[str, Any]) -> str:
    shapes = " ".join(f"{k}{tuple(v)}" for k, v in f.get("shapes", {}).items())
    layouts = ",".join(sorted(set(f.get("layouts", {}).values())))
    kwargs = ", ".join(f"{k}={v}" for k, v in f.get("kwargs", {}).items())
    return (
        f"{f['dtype']:<8} {f['kind']:<15} {f.get('distribution', '')} {shapes} [{layouts}]"
        + (f" {{{kwargs}}}" if kwargs else "")
        + f"\n{'':>10}{first_line(f.get('message', ''))}"
    )


def report(
    entries: Sequence[Entry],
    runs: dict[int, dict[str, Verdict]],
    seeds: Sequence[int],
    wall: dict[int, float],
) -> bool:
    bugs = [e for e in entries if e.role in ("bug", "upstream")]
    controls = [e for e in entries if e.role == "control"]
    baseline_of = {e.kernel: e.name for e in entries if e.role in BASELINE_ROLES}
    interpreted = {
        e.name for e in entries if any(runs[s].get(e.name) and runs[s][e.name].interpreter for s in seeds)
    }
    print(
        f"\nField evaluation: {len(controls)} correct kernels, {len(bugs)} mutants "
        f"({len([e for e in entries if e.name in interpreted])} entries ran through the Triton interpreter); "
        f"seeds {', '.join(map(str, seeds))}"
    )
    print(
        "marks per seed: X caught on a case the correct kernel passes, c caught only where the correct kernel "
        "fails too, ? undecided (the correct kernel's failures were not all recorded), . missed, E error"
    )
    if interpreted:
        print(
            "bfloat16 cases of entries run through Triton's interpreter are left out (it computes bf16 on bit "
            "patterns; FINDINGS.md F1); --count-interpreter-bf16 scores them"
        )
    print()
    header = f"{'bug class / mutant':<58} {'seeds':<{2 * len(seeds)}} caught  clean   fp32"
    print(header)
    print("-" * len(header))
    totals: Counter[str] = Counter()
    all_caught = True
    for cls, trigger in BUG_CLASSES.items():
        members = [e for e in bugs if e.bug_class == cls]
        if not members:
            continue
        marks_by_entry = {
            e.name: [bug_mark(runs[s][e.name], _baseline(runs[s], e, baseline_of)) for s in seeds]
            for e in members
        }
        caught = sum(m in "Xc?" for ms in marks_by_entry.values() for m in ms)
        clean = sum(m == "X" for ms in marks_by_entry.values() for m in ms)
        fp32 = sum(runs[s][e.name].failed_by_dtype.get("float32", 0) > 0 for e in members for s in seeds)
        n = len(members) * len(seeds)
        totals.update(caught=caught, clean=clean, fp32=fp32, n=n)
        all_caught &= caught == n
        print(f"{cls:<58} {'':<{2 * len(seeds)}} {f'{caught}/{n}':>6} {f'{clean}/{n}':>6} {f'{fp32}/{n}':>6}")
        print(f"  {trigger}")
        for e in members:
            marks = " ".join(marks_by_entry[e.name])
            tag = (" (triton)" if e.name in interpreted else "") + (
                " (shipped)" if e.role == "upstream" else ""
            )
            print(f"    {e.kernel + tag:<54} {marks}")
    print("-" * len(header))
    print(
        f"{'bugs caught (mutant x seed)':<58} {'':<{2 * len(seeds)}} "
        f"{totals['caught']}/{totals['n']:<4} {totals['clean']}/{totals['n']:<4} {totals['fp32']}/{totals['n']}"
    )
    print(
        '(fp32: caught by float32 cases alone, i.e. with the README\'s default quick_dtypes = ["float32"]; '
        "float32 cases are the same cases whatever other dtypes run)"
    )

    print("\nCorrect kernels: false alarms (failing cases / cases) per seed; [float32 failing cases]")
    any_flagged = False
    for e in controls:
        per_seed = [runs[s][e.name] for s in seeds]
        cells = " ".join(
            f"{v.cases_failed}/{v.cases_total}" if v.status in ("passed", "failed") else v.status
            for v in per_seed
        )
        cells += "  [" + " ".join(str(v.failed_by_dtype.get("float32", 0)) for v in per_seed) + "]"
        flagged = any(v.status != "passed" for v in per_seed)
        any_flagged |= flagged
        tag = " (triton)" if e.name in interpreted else ""
        print(f"  {'!!' if flagged else 'ok'} {e.kernel + tag:<40} {cells}")
    shipped = [e for e in entries if e.role == "upstream"]
    if shipped:
        print("\nThird-party kernels as shipped, with a real defect (their failures are true positives):")
    for e in [*shipped, *controls]:
        if e is (controls[0] if controls else None):
            print("\nFalse alarms in detail:")
        for s in seeds:
            v = runs[s][e.name]
            if v.status == "passed":
                continue
            kinds = Counter((f["dtype"], f["kind"]) for f in v.failures)
            summary = ", ".join(f"{d} {k} x{c}" for (d, k), c in sorted(kinds.items()))
            print(
                f"\n  {e.name} seed {s}: {v.cases_failed}/{v.cases_total} cases ({summary})"
                + (f" {v.message}" if v.message else "")
            )
            for f in v.failures[:MAX_LISTED]:
                print(f"    {describe_failure(f)}")
            if len(v.failures) > MAX_LISTED:
                print(f"    ... {len(v.failures) - MAX_LISTED} more recorded")
    if wall:
        print(
            "\nwall time per seed: "
            + ", ".join(f"seed {s} {wall[s]:.0f} s" for s in seeds if s in wall)
            + f"; total {sum(wall.values()) / 60:.1f} min"
        )
    met = all_caught and not any_flagged
    print(
        f"\ntarget (every mutant caught on every seed, no correct kernel flagged): {'MET' if met else 'NOT MET'}"
    )
    return met


def as_json(
    entries: Sequence[Entry], runs: dict[int, dict[str, Verdict]], seeds: Sequence[int]
) -> dict[str, Any]:
    baseline_of = {e.kernel: e.name for e in entries if e.role in BASELINE_ROLES}
    return {
        "seeds": list(seeds),
        "entries": [
            {
                "name": e.name,
                "role": e.role,
                "bug_class": e.bug_class,
                "per_seed": {
                    str(s): {
                        "status": runs[s][e.name].status,
                        "cases_failed": runs[s][e.name].cases_failed,
                        "cases_total": runs[s][e.name].cases_total,
                        "mark": bug_mark(runs[s][e.name], _baseline(runs[s], e, baseline_of))
                        if e.role != "control"
                        else None,
                        "kinds": sorted({f["kind"] for f in runs[s][e.name].failures}),
                    }
                    for s in seeds
                },
            }
            for e in entries
        ],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="the field gpuemu.toml")
    parser.add_argument("--suite", choices=("quick", "thorough"), default="quick")
    parser.add_argument("--seeds", type=int, default=5, help="how many master seeds (default 5)")
    parser.add_argument("--first-seed", type=int, default=1, help="the first master seed (default 1)")
    parser.add_argument("--only", action="append", default=[], help="only this kernel's entries (repeatable)")
    parser.add_argument("--dtype", action="append", default=[], help="passed to gpuemu-ci run --dtype")
    parser.add_argument(
        "--out", type=Path, help="keep each seed's results in OUT/seed-S (default: a temp dir)"
    )
    parser.add_argument(
        "--results", type=Path, help="re-score saved runs RESULTS/seed-S/results.json; run nothing"
    )
    parser.add_argument("--json", type=Path, help="also write every verdict to this file")
    parser.add_argument(
        "--count-interpreter-bf16",
        action="store_true",
        help="score the bfloat16 cases of ops run through Triton's interpreter too (left out by default)",
    )
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.first_seed < 0:
        parser.error("--seeds must be >= 1 and --first-seed >= 0")
    config = args.config.resolve()
    try:
        entries = parse_entries(config)
    except (OSError, ValueError, tomllib.TOMLDecodeError) as exc:
        print(f"field_score: {exc}", file=sys.stderr)
        return 2
    if args.only:
        unknown = sorted(set(args.only) - {e.kernel for e in entries})
        if unknown:
            print(f"field_score: unknown kernel(s) {', '.join(unknown)}", file=sys.stderr)
            return 2
        entries = [e for e in entries if e.kernel in args.only]
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    runs: dict[int, dict[str, Verdict]] = {}
    wall: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="field-score-") as scratch:
        out_root = args.out.resolve() if args.out else Path(scratch)
        for seed in seeds:
            if args.results:
                path = args.results / f"seed-{seed}" / "results.json"
                if not path.is_file():
                    print(f"field_score: no {path}", file=sys.stderr)
                    return 2
                document = json.loads(path.read_text())
            else:
                started = time.monotonic()
                try:
                    document = run_gpuemu(
                        config,
                        seed,
                        args.suite,
                        out_root / f"seed-{seed}",
                        [e.name for e in entries] if args.only else [],
                        args.dtype,
                    )
                except RuntimeError as exc:
                    print(f"field_score: {exc}", file=sys.stderr)
                    return 3
                wall[seed] = time.monotonic() - started
                print(f"seed {seed}: {wall[seed]:.0f} s", file=sys.stderr)
            runs[seed] = verdicts_of(document, not args.count_interpreter_bf16)
            absent = [e.name for e in entries if e.name not in runs[seed]]
            if absent:
                print(f"field_score: seed {seed} has no result for {', '.join(absent[:5])}", file=sys.stderr)
                return 2
    met = report(entries, runs, seeds, wall)
    if args.json:
        args.json.write_text(json.dumps(as_json(entries, runs, seeds), indent=2) + "\n")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
