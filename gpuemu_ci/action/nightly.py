"""Mode `nightly` (schedule): the thorough suite with a fresh seed; one issue per failing op, closed when it
passes again."""

from __future__ import annotations

from gpuemu_ci.action.step import ActionStep
from gpuemu_ci.render.escape import markdown_code_span, markdown_text
from gpuemu_ci.results.model import OpResult, Results

SHOWN_FAILURES = 5


def run(step: ActionStep) -> int:
    """Mode `nightly`: runs the gate, publishes it, and opens or closes one issue per failing op (needs
    github_token; without it, a warning); returns the gate's exit code."""
    from gpuemu_ci.github.issues import NightlyOp, sync_nightly_issues

    results = step.run_gate(step.config())
    code = step.publish(results, comment=False)
    client = step.client()
    if client is None:
        step.warn("no github_token: nightly issues were not opened or closed")
        return code
    ops = [NightlyOp(op.name, op.status, issue_details(op, results)) for op in results.ops]
    for outcome in sync_nightly_issues(client, step.ctx.repository, ops, run_url=step.ctx.run_url):
        if outcome.warning:
            step.warn(outcome.warning)
    return code


def issue_details(op: OpResult, results: Results) -> str:
    """The Markdown of a failing op's issue: the seed, the first failures and their replay commands."""
    lines = [f"Nightly seed `{results.seed}`: {op.cases_failed} of {op.cases_total} cases failed.", ""]
    for failure in op.failures[:SHOWN_FAILURES]:
        shapes = ", ".join(f"{k}{tuple(v)}" for k, v in failure.shapes.items())
        first_line = failure.message.splitlines()[0][:300] if failure.message else ""
        lines.append(
            f"- {markdown_text(failure.kind)} [{failure.dtype}] {markdown_text(shapes)} "
            f"{markdown_text(failure.distribution)}: {markdown_text(first_line)}"
        )
        lines.append(f"  replay: {markdown_code_span(failure.replay)}")
    return "\n".join(lines)
