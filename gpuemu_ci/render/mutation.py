"""The mutation part of a results document (`gpuemu-ci mutate`) as text: per op its score, the survivors with
their one-line diff and what the config likely lacks, and the mutants that were not killed for other reasons.
`mutation_lines` is the terminal's; `mutation_markdown` is the section of the PR comment, the step summary and
the nightly issue."""

from __future__ import annotations

from gpuemu_ci.render.escape import markdown_cell, markdown_code_span, markdown_text, terminal_text
from gpuemu_ci.results.mutation import MutantResult, MutantStatus, MutationReport, OpMutation

SHOWN = 20  # mutants listed per op and status in the markdown; results.json has them all


def headline(op: OpMutation) -> str:
    """ "mutation score 41/44 (93%); 3 survived, 1 equivalent?" or why the op was not scored."""
    if not op.scored:
        return op.message or "not scored"
    if op.lint_only:
        counts = [
            f"{op.killed} killed by the lint",
            f"{op.equivalent} equivalent? (the original's PTX)" if op.equivalent else "",
            f"{op.errored} errored" if op.errored else "",
            f"{op.not_run} not run" if op.not_run else "",
        ]
        listed = ", ".join(c for c in counts if c)
        return f"lint only, no score ({op.lint_only_because}): {listed} (of {op.mutants_planned} planned)"
    decided = op.killed + op.survived
    parts = []
    if decided:
        parts.append(f"mutation score {op.killed}/{decided} ({op.killed / decided:.0%})")
    else:
        parts.append("no mutant killed or survived")
    others = [
        f"{op.survived} survived" if op.survived else "",
        f"{op.equivalent} equivalent?" if op.equivalent else "",
        f"{op.errored} errored" if op.errored else "",
        f"{op.not_run} not run" if op.not_run else "",
    ]
    tail = ", ".join(o for o in others if o)
    return parts[0] + (f"; {tail}" if tail else "") + f" (of {op.mutants_planned} planned)"


def _where(mutant: MutantResult) -> str:
    return f"#{mutant.number} {mutant.operator} {mutant.file}:{mutant.line}"


def mutation_lines(report: MutationReport) -> list[str]:
    """The terminal's lines (control characters from the results made visible)."""
    lines = []
    for op in report.ops:
        lines.append(terminal_text(f"{op.op}: {headline(op)}"))
        for mutant in op.mutants:
            if mutant.status in (MutantStatus.SURVIVED, MutantStatus.EQUIVALENT):
                label = "SURVIVED" if mutant.status is MutantStatus.SURVIVED else "EQUIVALENT?"
                cached = " (cached)" if mutant.cached else ""
                lines.append(terminal_text(f"  {label} {_where(mutant)}{cached}"))
                lines.append(terminal_text(f"    - {mutant.before}"))
                lines.append(terminal_text(f"    + {mutant.after}"))
                if mutant.hint:
                    lines.append(terminal_text(f"    likely missing: {mutant.hint}"))
            elif mutant.status is MutantStatus.ERRORED:
                lines.append(terminal_text(f"  ERRORED {_where(mutant)}: {mutant.message or ''}"))
            elif op.lint_only and mutant.status is MutantStatus.KILLED:
                lines.append(terminal_text(f"  KILLED by the lint {_where(mutant)}: {mutant.message or ''}"))
            elif op.lint_only and mutant.hint and mutant.status is MutantStatus.NOT_RUN:
                lines.append(terminal_text(f"  NOT RUN {_where(mutant)}: {mutant.after}"))
                lines.append(terminal_text(f"    the lint could kill it: {mutant.hint}"))
    if report.cut_short:
        lines.append("the time budget ran out: the mutants left were not run")
    return lines


def mutation_markdown(report: MutationReport) -> str:
    """The section, in GitHub Markdown; every string from the results escaped."""
    out = ["### Mutation testing", ""]
    for op in report.ops:
        out.append(f"- **{markdown_text(op.op)}**: {markdown_text(headline(op))}")
    for op in report.ops:
        shown = [m for m in op.mutants if m.status in (MutantStatus.SURVIVED, MutantStatus.EQUIVALENT)]
        if not shown:
            continue
        out += ["", f"**{markdown_text(op.op)}**: mutants the suite let through", ""]
        out += ["| mutant | change | likely missing |", "|---|---|---|"]
        for mutant in shown[:SHOWN]:
            status = "survived" if mutant.status is MutantStatus.SURVIVED else "equivalent?"
            before = markdown_code_span(mutant.before, table_cell=True)
            after = markdown_code_span(mutant.after, table_cell=True)
            out.append(
                f"| {markdown_cell(_where(mutant))} ({status}) | {before} → {after} "
                f"| {markdown_cell(mutant.hint or '')} |"
            )
        if len(shown) > SHOWN:
            out.append(f"| … {len(shown) - SHOWN} more in results.json | | |")
    if report.cut_short:
        out += ["", "The time budget ran out: the mutants left were not run."]
    return "\n".join(out) + "\n"
