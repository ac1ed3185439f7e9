"""GitHub workflow-command annotations: ``::error file=gpuemu.toml,line=N,title=...::message``.

One annotation per failing or errored op (at its ``[[ops]]`` line), per kernel with lint
violations (at its source, on the first offending entry when the source is at hand), per compile
error (at the line the compiler named), per baseline regression, and a warning per skipped op.
Most important first. GitHub shows at most 10 per level and step and drops the rest silently,
so at most `PER_LEVEL` of each are printed and a final notice counts what was left out.
Every message and property goes through `escape.workflow_command_data` / `_property`, so a
newline in an op's message cannot end the command and start a forged one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from gpuemu_ci.render import text
from gpuemu_ci.render.escape import workflow_command
from gpuemu_ci.render.sources import entry_lines
from gpuemu_ci.results.model import OpStatus, Results

PER_LEVEL = 10  # GitHub's limit per level and step
MESSAGE_LIMIT = 4096  # the runner cuts longer messages


class Level(StrEnum):
    """The workflow command, which is also how GitHub shows the annotation."""

    ERROR = "error"
    WARNING = "warning"
    NOTICE = "notice"


@dataclass(frozen=True)
class Annotation:
    """One ``::error``/``::warning``/``::notice``; ``file`` is a repository path."""

    level: Level
    title: str
    message: str
    file: str | None = None
    line: int | None = None

    def command(self) -> str:
        """The workflow command line (the message cut to what the runner keeps, with a marker)."""
        properties = {"file": self.file, "line": self.line, "title": text.clip(self.title, 200)}
        return workflow_command(self.level.value, text.clip(self.message, MESSAGE_LIMIT), properties)


def report_annotations(report: Results, *, source_root: Path | None = None) -> list[Annotation]:
    """Every annotation for the report, most important first."""
    found: list[Annotation] = []
    config = report.config.path
    groups = report.failure_groups()
    for op in report.ops:
        mine = [g for g in groups if g.op is op]
        if op.status is OpStatus.FAILED or mine:
            parts = [
                text.group_title(g)
                + (
                    f" (worst {text.headroom(g.row.worst_headroom)})"
                    if g.row and g.row.worst_headroom is not None
                    else ""
                )
                for g in mine
            ]
            message = "; ".join(parts) or f"{op.name} failed"
            worst = next((g.worst for g in mine if g.worst), None)
            if worst is not None:
                message += (
                    f"\nWorst case {worst.case_id} ({worst.dtype}, {text.dims(worst.shapes)}, "
                    f"{worst.distribution}): {text.first_line(worst.message, 500)}\nReplay: {worst.replay}"
                )
            found.append(Annotation(Level.ERROR, f"gpuemu-ci: op {op.name} failed", message, config, op.line))
        elif op.status is OpStatus.ERROR:
            found.append(
                Annotation(
                    Level.ERROR,
                    f"gpuemu-ci: op {op.name} errored",
                    op.message or "the op could not be judged",
                    config,
                    op.line,
                )
            )
    for kernel in report.kernels:
        lines = entry_lines(report, kernel, source_root)
        failing = [v for v in kernel.violations if v.severity == "error"]
        if failing:
            found.append(
                Annotation(
                    Level.ERROR,
                    f"gpuemu-ci: kernel {kernel.name} failed lint",
                    "\n".join(v.message for v in failing),
                    report.repo_path(kernel.source),
                    next((lines[v.kernel] for v in failing if v.kernel in lines), None),
                )
            )
        if kernel.error is not None:
            error = kernel.error
            found.append(
                Annotation(
                    Level.ERROR,
                    f"gpuemu-ci: kernel {kernel.name} does not compile",
                    error.message,
                    report.repo_path(error.file or kernel.source),
                    error.line,
                )
            )
        unchecked = [v for v in kernel.violations if v.severity != "error"]
        if unchecked:
            found.append(
                Annotation(
                    Level.WARNING,
                    f"gpuemu-ci: kernel {kernel.name}: check not carried out",
                    "\n".join(v.message for v in unchecked),
                    report.repo_path(kernel.source),
                )
            )
    found += _regressions(report)
    for op, row, used in report.near_limit():
        title = f"gpuemu-ci: op {op.name} [{row.dtype}] close to its limit"
        line = text.near_limit(op, row, used, report.warn_threshold or 0.0)
        found.append(Annotation(Level.WARNING, title, line, config, op.line))
    for op, row in report.skipped_rows():
        title = f"gpuemu-ci: op {op.name} [{row.dtype}] not tested"
        found.append(Annotation(Level.WARNING, title, text.skipped_row(op, row), config, op.line))
    for op in report.ops:
        if op.status is OpStatus.SKIPPED and not op.dtypes:
            found.append(
                Annotation(
                    Level.WARNING,
                    f"gpuemu-ci: op {op.name} not tested",
                    f"skipped ({op.skip_reason or 'no reason given'})"
                    + (f": {op.message}" if op.message else ""),
                    config,
                    op.line,
                )
            )
    found += [Annotation(Level.WARNING, "gpuemu-ci", note) for note in report.notes]
    for op in report.ops:
        for note in op.triton_notes:
            found.append(
                Annotation(Level.WARNING, f"gpuemu-ci: op {op.name} (Triton)", note, config, op.line)
            )
    if not report.executed:
        found.append(Annotation(Level.ERROR, "gpuemu-ci: nothing was tested", text.headline(report), config))
    return found


def _regressions(report: Results) -> list[Annotation]:
    if report.diff is None or report.diff.status != "compared":
        return []
    lines = {op.name: op.line for op in report.ops}
    sources = {k.name: report.repo_path(k.source) for k in report.kernels}
    found = []
    for entry in report.diff.entries:
        if entry.classification != "regressed":
            continue
        level = Level.ERROR if entry.severity == "failure" else Level.WARNING
        where = (
            (report.config.path, lines.get(entry.name))
            if entry.kind == "op"
            else (sources.get(entry.name, report.config.path), None)
        )
        message = (
            "; ".join(r.message or f"{r.metric}: {r.old} -> {r.new}" for r in entry.reasons) or "regressed"
        )
        found.append(
            Annotation(
                level, f"gpuemu-ci: {entry.kind} {entry.name} [{entry.variant}] regressed", message, *where
            )
        )
    return found


def render_annotations(
    report: Results, *, per_level: int = PER_LEVEL, source_root: Path | None = None
) -> str:
    """The report's annotation commands (see `format_annotations`)."""
    return format_annotations(report_annotations(report, source_root=source_root), per_level=per_level)


def format_annotations(annotations: Iterable[Annotation], *, per_level: int = PER_LEVEL) -> str:
    """Annotation commands in the given order (most important first), at most ``per_level`` of each level,
    then a notice counting the rest: GitHub drops them without a word."""
    shown: list[Annotation] = []
    left_out = 0
    counts = dict.fromkeys(Level, 0)
    notice_slots = per_level - 1  # one notice slot is kept for the "left out" notice
    for annotation in annotations:
        cap = notice_slots if annotation.level is Level.NOTICE else per_level
        if counts[annotation.level] < cap:
            counts[annotation.level] += 1
            shown.append(annotation)
        else:
            left_out += 1
    if left_out:
        message = (
            f"{left_out} more annotation(s) not shown: GitHub displays at most {per_level} per level "
            "and step. See the step summary."
        )
        shown.append(Annotation(Level.NOTICE, "gpuemu-ci", message))
    return "".join(a.command() + "\n" for a in shown)
