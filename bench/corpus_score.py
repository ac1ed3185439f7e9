"""Scores the bug corpus (bench/corpus/gpuemu.toml): gpuemu-ci's quick suite against a KernelBench-style
one-shape allclose baseline, over several master seeds.

For every master seed it runs `gpuemu-ci run --suite quick --seed S` once over all entries (a real
subprocess, exactly what a user runs) and the one-shape baseline in-process
(bench/corpus/oneshape_baseline.py).
An entry named `<op>.bug.<class>` is caught when the oracle fails it; `<op>.control` and `<op>.hn.<variant>`
(hard negatives) are correct kernels, and failing one is a false alarm. It prints, per bug class, how many
(entry, seed) pairs each oracle caught, then every falsely flagged control, then totals.

    python bench/corpus_score.py [--seeds 5] [--first-seed 1] [--only softmax --only matmul] [--details]

Exit status: 0 when gpuemu-ci caught every bug on every seed and flagged no control; 1 otherwise (the
baseline's score never affects it); 2 for a bad argument or corpus.
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

from gpuemu_ci.config.load import load_config
from gpuemu_ci.config.model import Config, OpSpec
from gpuemu_ci.errors import GpuemuError

HERE = Path(__file__).resolve().parent
DEFAULT_CONFIG = HERE / "corpus" / "gpuemu.toml"

# The bug classes the corpus must cover, with the trigger one fixed shape misses.
BUG_CLASSES: dict[str, str] = {
    "tail_mask_leak": "masked lanes load 0, not the identity (N % BLOCK != 0)",
    "modular_index_wrap": "offs % K instead of a mask (K % BLOCK_K != 0)",
    "acc_assign": "acc = instead of acc += (K > BLOCK_K)",
    "dropped_k_tail": "last partial K tile skipped (K % BLOCK_K != 0)",
    "missing_inv_sqrt_d": "scores not scaled by 1/sqrt(d) (d >= 4)",
    "online_softmax_no_rescale": "no exp(m_old - m_new) rescale (max grows in a later tile)",
    "low_precision_accumulator": "fp16/bf16 accumulator (long reductions)",
    "non_pow2_tree_drops_lanes": "halving tree over a non-power-of-two block",
    "stride_assumption": "offsets as if contiguous (non-contiguous inputs)",
    "max_init_zero": "running max starts at 0 (all-negative or underflow rows)",
    "one_pass_variance": "E[x^2] - E[x]^2 (|mean| >> std)",
    "truncating_bf16_store": "fp32 -> bf16 by truncation (rounding bias)",
    "ignored_kwarg": "a kwarg never forwarded (eps, position offset)",
    "tanh_gelu_spec_mismatch": "tanh GELU where erf GELU is specified",
    "bias_wrong_axis": "bias indexed with the row extent (M != N)",
    "scan_no_carry": "no carry across scan blocks (N > BLOCK)",
    "divide_by_block_size": "divides by BLOCK, not N (N not a power of two)",
    "writes_into_input": "uses its input as scratch (output still right)",
    "nondeterministic": "split-K atomics in arrival order (declared deterministic)",
    "unwritten_out_buffer": "floor-divided grid leaves out= edges unwritten",
    "int32_offset_overflow": "int32 element offsets wrap (past 2^31 elements)",
    "long_row_acc_assign": "acc = across 4096-wide blocks (N > 4096)",
    "vocab_chunk_acc_assign": "lse of the last 16384-logit chunk only (V > 16384)",
    "dtype_path_vocab_acc_assign": "bf16 path's 32768-logit chunks summed with = (bf16, V > 32768)",
    "eps_ignored": "no eps under the rsqrt (rows of zeros)",
    "sumsq_input_dtype": "squares summed in the 16-bit input dtype (fp16/bf16 cases)",
    "row_stride_n": "rows stepped by N (row-padded slices x[:, :N])",
    "conv_halo": "no KW - 1 halo (LO > 128 and KW > stride)",
    "angles_low_precision": "RoPE positions in the input dtype (16-bit, positions > 256)",
    "wrong_operand": "k normalised with q's weight",
    "expert_tail_dropped": "last partial block of experts never scored (E % 8 != 0)",
    "wrong_affine_index": "group-norm affine indexed by group (CPG > 1)",
    # Backward passes (issue #20: `backward = true`, the gradients judged per input)
    "grad_acc_assign": "backward: dweight row blocks summed with = (M > block)",
    "grad_missing_chain_term": "backward: a chain-rule term dropped",
    "grad_reduce_wrong_axis": "backward: a row statistic reduced over the rows",
    "grad_gqa_one_head": "backward: a GQA key/value gradient from one query head, not the group (G > 1)",
    "grad_truncating_bf16_store": "backward: dx stored through bf16 by truncation",
    "grad_scatter_assign": "backward: repeated ids' rows assigned, not added (an id occurs twice)",
    "grad_index_without_stride": "backward: a window's max at o + k, not o * stride + k (stride > 1)",
    # Bugs only a GPU shows, in Triton (issue #28: the interpreter under gpuemu_ci/triton_cpu)
    "tail_other_missing": "Triton: masked tail loaded without other=-inf before a max",
    "store_past_end": "Triton: unmasked store, last program (N % BLOCK != 0)",
    "missing_row_mask": "Triton: 2D tile masked by columns only (M % BM != 0)",
    "split_k_no_atomic": "Triton: split sums added with load + store (programs race)",
    "dot_needs_ieee": "Triton: a scan through tl.dot at its TF32 default",
    "fp8_wrong_format": "Triton: fp8 e5m2 stored where e4m3 is specified (2 mantissa bits, not 3)",
}
# Classes that count as caught only with a failure of one of these kinds (where the finding must say what and
# where: an out-of-bounds access, a race), not with any failure.
EXPECTED_KINDS: dict[str, frozenset[str]] = {
    "tail_other_missing": frozenset({"mismatch", "nonfinite"}),
    "store_past_end": frozenset({"out_of_bounds"}),
    "missing_row_mask": frozenset({"out_of_bounds"}),
    "split_k_no_atomic": frozenset({"race"}),
    "dot_needs_ieee": frozenset({"mismatch"}),
    "nondeterministic": frozenset({"nondeterministic"}),
}
# Classes only the thorough suite's large sizes reach: their entries (and the op's correct kernels) are also run
# with `--suite thorough`, which must catch the bug; the quick suite must not (it never draws such sizes).
THOROUGH_ONLY = {"int32_offset_overflow"}
THOROUGH_ITERATIONS = 8  # cases per dtype in that run, besides the large-size cases it always adds
ROLES = ("control", "hn", "bug")


@dataclass(frozen=True)
class Entry:
    name: str  # <op>.<role>[.<variant>]
    op: str
    role: str
    variant: str  # bug class for bugs; hard-negative label; "" for the control
    spec: OpSpec

    @property
    def is_bug(self) -> bool:
        return self.role == "bug"


@dataclass
class Score:
    """Per entry: which seeds each oracle flagged, and what gpuemu-ci said."""

    gpuemu: dict[int, bool] = field(default_factory=dict)
    baseline: dict[int, bool] = field(default_factory=dict)
    notes: dict[int, str] = field(default_factory=dict)
    baseline_notes: dict[int, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def parse_entries(config: Config) -> list[Entry]:
    entries = []
    for spec in config.ops:
        parts = spec.name.split(".")
        role = parts[1] if len(parts) > 1 else ""
        if role not in ROLES or (role == "control") != (len(parts) == 2) or len(parts) > 3:
            raise ValueError(
                f"entry {spec.name!r}: expected <op>.control, <op>.hn.<variant> or <op>.bug.<class>"
            )
        variant = parts[2] if len(parts) == 3 else ""
        if role == "bug" and variant not in BUG_CLASSES:
            raise ValueError(f"entry {spec.name!r}: unknown bug class {variant!r}")
        entries.append(Entry(spec.name, parts[0], role, variant, spec))
    return entries


def check_corpus(entries: Sequence[Entry]) -> list[str]:
    """What the corpus promises: every op has a control and a bug; every bug class has an entry."""
    problems = []
    ops = sorted({e.op for e in entries})
    for op in ops:
        roles = {e.role for e in entries if e.op == op}
        if "control" not in roles or "bug" not in roles:
            problems.append(f"op {op!r} needs a control and at least one bug")
    covered = {e.variant for e in entries if e.is_bug}
    problems.extend(f"no entry for bug class {c!r}" for c in BUG_CLASSES if c not in covered)
    return problems


def run_gpuemu(
    config_path: Path, seed: int, out_dir: Path, names: Sequence[str], suite: str = "quick"
) -> dict:
    """One run of a suite over the selected entries; returns results.json."""
    command = [
        sys.executable,
        "-m",
        "gpuemu_ci",
        "run",
        "--config",
        str(config_path),
        "--suite",
        suite,
        "--seed",
        str(seed),
        "--out",
        str(out_dir),
        *[arg for n in names for arg in ("--op", n)],
    ]
    if suite != "quick":
        command += ["--iterations", str(THOROUGH_ITERATIONS)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    results = out_dir / "results.json"
    if done.returncode not in (0, 1) or not results.is_file():
        raise RuntimeError(f"gpuemu-ci exited {done.returncode} for seed {seed}:\n{done.stderr[-3000:]}")
    return json.loads(results.read_text())


def describe_op_result(op: dict) -> str:
    if op["status"] != "failed":
        worst = max((d.get("worst_headroom") or 0.0 for d in op.get("dtypes", [])), default=0.0)
        skipped = [r for d in op.get("dtypes", []) for r in (d.get("coverage") or {}).get("skipped", [])]
        grads: dict[str, float] = {}
        for d in op.get("dtypes", []):
            for g in d.get("gradients", []):
                key = f"grad of {g['of']} ({g['rule']})"
                grads[key] = max(grads.get(key, 0.0), g.get("worst_headroom") or 0.0)
        gradients = "".join(f", {k} {v:.3g}" for k, v in sorted(grads.items()))
        return f"{op['status']}, worst headroom {worst:.3g}{gradients}" + (
            f" (not run here: {'; '.join(skipped)})" if skipped else ""
        )
    kinds = sorted(
        {f["kind"] + (f" of {f['output']}" if f.get("output") else "") for f in op.get("failures", [])}
    )
    first = op["failures"][0] if op.get("failures") else None
    where = (
        f"; first: {first['dtype']} {first['distribution']} {first['shapes']} seed {first['case_seed']}"
        if first
        else ""
    )
    return f"{op['cases_failed']}/{op['cases_total']} cases failed ({', '.join(kinds)}){where}"


def score(
    config_path: Path,
    entries: Sequence[Entry],
    seeds: Sequence[int],
    out_root: Path,
    quick_dtypes: tuple[str, ...] | None,
) -> dict[str, Score]:
    from oneshape_baseline import judge_entry  # bench/corpus is on sys.path (see main)

    scores = {e.name: Score() for e in entries}
    for seed in seeds:
        started = time.monotonic()
        document = run_gpuemu(config_path, seed, out_root / f"seed-{seed}", [e.name for e in entries])
        by_name = {op["name"]: op for op in document["ops"]}
        for entry in entries:
            op = by_name[entry.name]
            s = scores[entry.name]
            s.gpuemu[seed] = op["status"] == "failed"
            expected = EXPECTED_KINDS.get(entry.variant) if entry.is_bug else None
            if expected is not None:
                s.gpuemu[seed] = any(f["kind"] in expected for f in op.get("failures", []))
            s.notes[seed] = describe_op_result(op)
            if op["status"] not in ("passed", "failed"):
                s.errors.append(f"seed {seed}: {op['status']}: {op.get('message')}")
        thorough_ops = {e.op for e in entries if e.variant in THOROUGH_ONLY}
        thorough = [e for e in entries if e.op in thorough_ops]
        if thorough:
            document = run_gpuemu(
                config_path, seed, out_root / f"seed-{seed}-thorough", [e.name for e in thorough], "thorough"
            )
            by_name = {op["name"]: op for op in document["ops"]}
            for entry in thorough:
                op, s = by_name[entry.name], scores[entry.name]
                quick_failed = s.gpuemu[seed]
                if entry.is_bug and entry.variant in THOROUGH_ONLY:
                    s.gpuemu[seed] = op["status"] == "failed"
                    if quick_failed:
                        s.errors.append(
                            f"seed {seed}: the quick suite caught it, which it cannot do by design"
                        )
                else:
                    s.gpuemu[seed] = quick_failed or op["status"] == "failed"
                s.notes[seed] = f"thorough: {describe_op_result(op)}; quick: {s.notes[seed]}"
        gpuemu_s = time.monotonic() - started
        started = time.monotonic()
        for entry in entries:
            run_dtypes = (
                tuple(d for d in entry.spec.dtypes if d in quick_dtypes) or entry.spec.dtypes[:1]
                if quick_dtypes is not None
                else entry.spec.dtypes
            )
            verdict = judge_entry(entry.spec, run_dtypes, seed)
            scores[entry.name].baseline[seed] = verdict.caught
            scores[entry.name].baseline_notes[seed] = verdict.detail
        print(
            f"seed {seed}: gpuemu-ci {gpuemu_s:.1f} s, baseline {time.monotonic() - started:.1f} s",
            file=sys.stderr,
        )
    return scores


def _count(scores: dict[str, Score], entries: Sequence[Entry], oracle: str) -> tuple[int, int]:
    hits = [v for e in entries for v in getattr(scores[e.name], oracle).values()]
    return sum(hits), len(hits)


def report(entries: Sequence[Entry], scores: dict[str, Score], seeds: Sequence[int], details: bool) -> bool:
    """Prints the tables; returns True when gpuemu-ci met the target."""
    bugs = [e for e in entries if e.is_bug]
    controls = [e for e in entries if not e.is_bug]
    print(
        f"\nBug corpus: {len({e.op for e in entries})} ops, {len(controls)} correct kernels "
        f"({sum(e.role == 'control' for e in controls)} controls + "
        f"{sum(e.role == 'hn' for e in controls)} hard negatives), {len(bugs)} buggy kernels; "
        f"master seeds {', '.join(map(str, seeds))}\n"
    )
    header = f"{'bug class':<28} {'trigger':<58} {'gpuemu-ci':>10} {'one-shape':>10}"
    print(header)
    print("-" * len(header))
    for cls, trigger in BUG_CLASSES.items():
        members = [e for e in bugs if e.variant == cls]
        if not members:
            continue
        g, n = _count(scores, members, "gpuemu")
        b, _ = _count(scores, members, "baseline")
        print(f"{cls:<28} {trigger:<58} {f'{g}/{n}':>10} {f'{b}/{n}':>10}")
    g_total, n_total = _count(scores, bugs, "gpuemu")
    b_total, _ = _count(scores, bugs, "baseline")
    every_g = sum(all(scores[e.name].gpuemu.values()) for e in bugs)
    every_b = sum(all(scores[e.name].baseline.values()) for e in bugs)
    print("-" * len(header))
    print(f"{'bugs caught (entry x seed)':<87} {f'{g_total}/{n_total}':>10} {f'{b_total}/{n_total}':>10}")
    print(
        f"{'buggy entries caught on every seed':<87} {f'{every_g}/{len(bugs)}':>10} "
        f"{f'{every_b}/{len(bugs)}':>10}"
    )
    fg, nc = _count(scores, controls, "gpuemu")
    fb, _ = _count(scores, controls, "baseline")
    print(f"{'correct kernels falsely flagged (entry x seed)':<87} {f'{fg}/{nc}':>10} {f'{fb}/{nc}':>10}")

    flagged = [(e, s) for e in controls for s in seeds if scores[e.name].gpuemu.get(s)]
    missed = [(e, s) for e in bugs for s in seeds if not scores[e.name].gpuemu.get(s)]
    base_flagged = [(e, s) for e in controls for s in seeds if scores[e.name].baseline.get(s)]
    for title, items, notes in (
        ("gpuemu-ci false alarms", flagged, "notes"),
        ("gpuemu-ci misses", missed, "notes"),
        ("one-shape baseline false alarms", base_flagged, "baseline_notes"),
    ):
        if items:
            print(f"\n{title}:")
            for e, s in items:
                print(f"  {e.name} (seed {s}): {getattr(scores[e.name], notes)[s]}")
    errors = [(e, msg) for e in entries for msg in scores[e.name].errors]
    for e, msg in errors:
        print(f"  ERROR {e.name}: {msg}")
    if details:
        print("\nPer entry (first seed):")
        first = seeds[0]
        for e in entries:
            s = scores[e.name]
            print(
                f"  {e.name:<44} gpuemu-ci: {s.notes[first]}\n  {'':<44} one-shape: {s.baseline_notes[first]}"
            )
    met = not flagged and not missed and not errors
    print(
        f"\ngpuemu-ci target (every bug caught, no correct kernel flagged, on every seed): "
        f"{'MET' if met else 'NOT MET'}"
    )
    return met


def as_json(entries: Sequence[Entry], scores: dict[str, Score], seeds: Sequence[int], met: bool) -> dict:
    """Every verdict, for tracking the score over time."""
    return {
        "seeds": list(seeds),
        "target_met": met,
        "entries": [
            {
                "name": e.name,
                "op": e.op,
                "role": e.role,
                "variant": e.variant,
                "gpuemu_ci_failed": {str(s): scores[e.name].gpuemu[s] for s in seeds},
                "one_shape_failed": {str(s): scores[e.name].baseline[s] for s in seeds},
                "gpuemu_ci": {str(s): scores[e.name].notes[s] for s in seeds},
                "one_shape": {str(s): scores[e.name].baseline_notes[s] for s in seeds},
            }
            for e in entries
        ],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="the corpus gpuemu.toml")
    parser.add_argument("--seeds", type=int, default=5, help="how many master seeds (default 5)")
    parser.add_argument("--first-seed", type=int, default=1, help="the first master seed (default 1)")
    parser.add_argument("--only", action="append", default=[], help="only entries of this op (repeatable)")
    parser.add_argument("--out", type=Path, help="keep each seed's results.json here (default: a temp dir)")
    parser.add_argument("--details", action="store_true", help="print every entry's verdicts (first seed)")
    parser.add_argument("--json", type=Path, help="also write every entry's per-seed verdicts to this file")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.first_seed < 0:
        parser.error("--seeds must be >= 1 and --first-seed >= 0")
    try:
        config = load_config(args.config.resolve())
        entries = parse_entries(config)
    except (GpuemuError, ValueError) as exc:
        print(f"corpus_score: {exc}", file=sys.stderr)
        return 2
    problems = check_corpus(entries)
    if args.only:
        unknown = sorted(set(args.only) - {e.op for e in entries})
        if unknown:
            print(f"corpus_score: unknown op(s) {', '.join(unknown)}", file=sys.stderr)
            return 2
        entries = [e for e in entries if e.op in args.only]
    elif problems:
        print("corpus_score: the corpus is incomplete:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    sys.path.insert(0, str(config.root))  # the kernels and the baseline live next to the corpus config
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    with tempfile.TemporaryDirectory(prefix="corpus-score-") as scratch:
        out_root = args.out.resolve() if args.out else Path(scratch)
        try:
            scores = score(config.path, entries, seeds, out_root, config.ci.quick_dtypes)
        except RuntimeError as exc:
            print(f"corpus_score: {exc}", file=sys.stderr)
            return 1
    met = report(entries, scores, seeds, args.details)
    if args.json:
        args.json.write_text(json.dumps(as_json(entries, scores, seeds, met), indent=2) + "\n")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
