"""Mode `comment` (the workflow_run companion for pull requests from forks): comment on the PR from the results
its run uploaded. Those results are the fork's: untrusted, validated on reading and checked against the
commit the triggering run tested (from the event, which the pull request cannot forge). The comment says
that its figures are the fork's unverified artifact, shows the triggering run's conclusion as GitHub reports
it, and never shows a pass unless that run succeeded."""

from __future__ import annotations

from gpuemu_ci.action.step import ActionStep
from gpuemu_ci.errors import ExitCode, InfraError
from gpuemu_ci.render.markdown import UnverifiedSource
from gpuemu_ci.results.codec import read_results
from gpuemu_ci.results.model import Results


def run(step: ActionStep) -> int:
    """Mode `comment`: posts (or updates) the PR comment from a results file an earlier step wrote (the PR it
    goes to comes from the event, never from that file); returns the exit code."""
    from gpuemu_ci.github.client import GitHubError
    from gpuemu_ci.github.comments import resolve_pull_request

    results = read_results(step.results_path())
    step.outputs["comment_url"] = ""
    client = step.client()
    if client is None:
        step.warn("no github_token: cannot comment")
        return int(ExitCode.PASSED)
    triggering = step.ctx.triggering_run
    if triggering is not None:
        check_tested_commit(results, triggering.head_sha)
    try:
        pr = (
            triggering.pr_numbers[0]
            if triggering and triggering.pr_numbers
            else resolve_pull_request(client, step.ctx)
        )
    except GitHubError as exc:
        step.warn(f"could not look up the pull request of the triggering run: {exc.message}")
        return int(ExitCode.PASSED)
    if pr is None:
        step.warn("could not find the pull request of the triggering run; no comment posted")
        return int(ExitCode.PASSED)
    # Link the run that tested the PR (its artifacts hold the snapshots), not this companion run; its
    # id comes from the event, not from the uploaded (untrusted) results.
    run_url = (
        f"{step.ctx.server_url.rstrip('/')}/{step.ctx.repository}/actions/runs/{triggering.id}"
        if triggering
        else None
    )
    unverified = UnverifiedSource(
        conclusion=triggering.conclusion if triggering else None,
        head_repository=triggering.head_repository if triggering else step.ctx.head_repository,
    )
    step.post_comment(results, pr, run_url=run_url or step.ctx.run_url, unverified=unverified)
    return int(ExitCode.PASSED)


def check_tested_commit(results: Results, head_sha: str) -> None:
    """The artifact must describe the commit the triggering run tested: a stale or swapped results file would
    otherwise be commented as this PR's."""
    tested = results.tested_commit
    if tested != head_sha:
        raise InfraError(
            f"the results artifact is for commit {tested or '(none recorded)'}, but the run that triggered this "
            f"one tested {head_sha}; no comment posted (re-run the pull request's workflow)"
        )
