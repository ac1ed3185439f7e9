"""What a run covered, in words: the coverage of each op x dtype and the dtypes a suite left out. Plain text,
escaped by each renderer (the step summary's and the HTML report's coverage tables)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuemu_ci.render.text import number
from gpuemu_ci.results.model import Coverage, OpResult, Results

SIZE_CLASS_NAMES = {"typical": "typical", "boundary": "boundary", "tile": "tile±1", "large": "large"}
MAX_TILE_SIZES_SHOWN = 8


@dataclass(frozen=True)
class CoverageRow:
    """One row of a coverage table (one op at one dtype), each cell plain text that the renderer escapes."""

    op: str
    dtype: str
    dims: str
    sizes: str
    layouts: str
    values: str
    kwargs: str
    notes: str  # caps and cases not run here


def _counts(counts: dict[str, int], names: dict[str, str] | None = None) -> str:
    if not counts:
        return "none"
    return ", ".join(
        f"{(names or {}).get(k, k)} {number(v)}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])
    )


def _sizes(coverage: Coverage) -> str:
    text = ", ".join(
        f"{SIZE_CLASS_NAMES.get(name, name)} {number(count)}"
        for name, count in sorted(
            coverage.size_classes.items(),
            key=lambda kv: list(SIZE_CLASS_NAMES).index(kv[0]) if kv[0] in SIZE_CLASS_NAMES else 9,
        )
    )
    longest = [(name, sizes) for name, sizes in coverage.tile_sizes.items() if sizes]
    if longest:
        name, sizes = max(longest, key=lambda item: max(item[1]))
        shown = sorted(sizes, reverse=True)[:MAX_TILE_SIZES_SHOWN]
        text += (
            f" ({name} up to {', '.join(str(s) for s in shown)}{', …' if len(sizes) > len(shown) else ''})"
        )
    return text or "none"


def coverage_row(op: OpResult, dtype: str, coverage: Coverage) -> CoverageRow:
    """The coverage row of `op` at `dtype`: the dims' ranges (and the declared maximums the suite never
    reached), sizes, layouts, value modes and kwargs seen, and notes on caps and cases not run here."""
    declared = coverage.declared_max
    dims = ", ".join(
        (f"{name} {r.min}" if r.min == r.max else f"{name} {r.min}–{r.max}")
        + (" (max)" if declared.get(name) == r.max and r.min != r.max else "")
        for name, r in coverage.dims.items()
    )
    short = [
        f"{name} {declared[name]} (largest {r.max})"
        for name, r in coverage.dims.items()
        if name in declared and r.max < declared[name]
    ]
    modes = coverage.value_modes
    values = f"{len(modes)} mode(s): " + _counts({k.replace("adversarial:", ""): v for k, v in modes.items()})
    kwargs = "; ".join(
        f"{name} {', '.join(_show(v) for v in values_)}" for name, values_ in coverage.kwargs.items()
    )
    notes = []
    if coverage.capped:
        notes.append(
            f"{number(coverage.capped)} case(s) shrunk to {number(coverage.max_elements)} elements per input "
            f"(ci.max_elements): {'; '.join(coverage.cap_examples)}"
        )
    if short:
        notes.append(f"declared max not reached: {', '.join(short)}")
    notes += [f"not run here: {reason}" for reason in coverage.skipped]
    return CoverageRow(
        op=op.name,
        dtype=dtype,
        dims=dims or "none",
        sizes=_sizes(coverage),
        layouts=_counts(coverage.layouts),
        values=values,
        kwargs=kwargs or "none",
        notes="; ".join(notes) or "",
    )


def _show(value: object) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def coverage_rows(report: Results) -> list[CoverageRow]:
    """One row per op x dtype that ran."""
    return [
        coverage_row(op, row.dtype, row.coverage)
        for op in report.ops
        for row in op.dtypes
        if row.coverage is not None
    ]


def dtypes_not_run(report: Results) -> list[str]:
    """`bfloat16 not run in the quick suite (softmax, rmsnorm)`, one line per left-out dtype."""
    by_dtype: dict[str, list[str]] = {}
    for op in report.ops:
        for dtype in op.dtypes_not_run:
            by_dtype.setdefault(dtype, []).append(op.name)
    lines = []
    for dtype, ops in by_dtype.items():
        names = ", ".join(ops[:6]) + (f" and {len(ops) - 6} more" if len(ops) > 6 else "")
        lines.append(f"{dtype} not run in the {report.suite} suite ({names})")
    return lines
