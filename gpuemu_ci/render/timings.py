"""`gpuemu-ci run --profile`, and the bench/ scripts: where each op's seconds went (results/timings.py), as a
plain-text table. Seconds of every worker process are summed, so with several jobs a row can exceed the run's
wall time; the last column says which phase took most."""

from __future__ import annotations

from collections.abc import Sequence

from gpuemu_ci.results.model import Results
from gpuemu_ci.results.timings import PHASES, OpTimings, summed

# Column headings, short enough for a terminal.
_HEADINGS = {
    "worker_start": "start",
    "load": "load",
    "inputs": "inputs",
    "triton_prepare": "triton",
    "op": "op",
    "reference": "ref",
    "judge": "judge",
    "transport": "transport",
    "explain": "explain",
}


def profile_rows(rows: Sequence[tuple[str, OpTimings | None]], wall_s: float | None = None) -> str:
    """The table of (name, split) rows with a total row; `wall_s`: the run's wall time, said under it."""
    width = max([len(name) for name, _ in rows] + [len("total")])
    header = f"{'op':<{width}} {'cases':>5} " + " ".join(f"{_HEADINGS[p]:>9}" for p in PHASES)
    lines = [header + f" {'sum':>9}  most"]
    for name, split in [*rows, ("total", summed(t for _, t in rows))]:
        if split is None:
            lines.append(f"{name:<{width}} {'-':>5}  (no time split: not run in worker processes)")
            continue
        seconds = split.seconds()
        most = max(seconds, key=lambda p: seconds[p])
        share = seconds[most] / split.total_s if split.total_s else 0.0
        cells = " ".join(f"{seconds[p]:9.2f}" for p in PHASES)
        lines.append(f"{name:<{width}} {split.cases:>5} {cells} {split.total_s:9.2f}  {most} {share:.0%}")
    if wall_s is not None:
        lines.append(
            f"wall {wall_s:.1f} s; seconds per phase summed over every worker process (see docs/benchmarks.md)"
        )
    return "\n".join(lines)


def profile_table(results: Results) -> str:
    """Every op's split, and the total."""
    return profile_rows([(op.name, op.timings) for op in results.ops], results.summary.duration_s)
