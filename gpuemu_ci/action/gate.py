"""Mode `gate` (pull requests): run, diff against the base branch's `gpuemu-baseline` artifact, publish and
comment once per job."""

from __future__ import annotations

import shutil
from pathlib import Path

from gpuemu_ci.action.step import ActionStep
from gpuemu_ci.diff.baseline import BaselineSource
from gpuemu_ci.pipeline.gate import GateBaseline
from gpuemu_ci.results.diff import BaselineProvenance

BASELINE_DIR = ".baseline"  # inside output_dir: the downloaded artifact, kept for `gpuemu-ci diff` by hand
# Plain words: the renderers escape backticks in messages.
HOW_BASELINES_ARE_MADE = (
    "Baselines come from the gpuemu-baseline artifact that this Action uploads in baseline mode on pushes "
    "to the base branch (gpuemu-ci init writes that workflow)."
)


NO_CHECK = "The gate ran without a regression check."
UNAVAILABLE_HINTS = {
    "network": "GitHub's API could not be reached (a network fault, not a permission problem). ",
    "forbidden": "The job needs the permission actions: read. ",
    "api": "GitHub's API answered with an error. ",
    "artifact": "The artifact could not be unpacked. ",
}


def run(step: ActionStep) -> int:
    """Mode `gate` (the default): reads the baseline before any code under test runs, runs the gate, and
    publishes it with the PR comment; returns the gate's exit code."""
    config = step.config()
    source = baseline_source(step)
    if source is not None:  # read now: code under test, which runs next, could replace the file
        source = source.read_with(lambda path: step.read_untrusted(path, "baseline"))
    baseline = None if source is None else GateBaseline(source, step.inputs.fail_on_regression)
    results = step.run_gate(config, baseline)
    return step.publish(results, comment=True)


def baseline_source(step: ActionStep) -> BaselineSource | None:
    """What the `baseline` input names: none, a file in the workspace, or (auto) the base branch's artifact."""
    choice = step.inputs.baseline
    if choice == "none":
        return None
    if choice != "auto":
        path = Path(choice) if Path(choice).is_absolute() else step.workspace / choice
        return BaselineSource(
            path=path, shown_as=choice, provenance=BaselineProvenance(source="input", path=choice)
        )
    client = step.client()
    if client is None:
        return BaselineSource(
            missing=f"no github_token to look up the gpuemu-baseline artifact. {HOW_BASELINES_ARE_MADE}"
        )
    from gpuemu_ci.github.artifacts import MatchKind, fetch_baseline

    target = step.out_dir / BASELINE_DIR
    # A previous run's copy: self-hosted runners keep workspaces between jobs.
    shutil.rmtree(target, ignore_errors=True)
    fetched = fetch_baseline(client, step.ctx, target)
    match = fetched.match
    if match.kind is MatchKind.UNAVAILABLE:
        # Not a first run: the lookup itself failed. Say why in the words that fit the cause.
        step.warn(f"baseline: {match.reason}. {UNAVAILABLE_HINTS.get(match.cause or '', '')}{NO_CHECK}")
    found = _find_baseline_file(fetched.directory)
    if found is None:
        reason = (
            match.reason if not fetched.directory else "the gpuemu-baseline artifact holds no baseline.json"
        )
        return BaselineSource(missing=f"{reason.rstrip('.')}. {HOW_BASELINES_ARE_MADE}")
    provenance = BaselineProvenance(
        source="artifact", match=match.label, reason=match.reason, run_id=match.run_id, commit=match.sha
    )
    return BaselineSource(path=found, shown_as=step.relative(found), provenance=provenance)


def _find_baseline_file(directory: Path | None) -> Path | None:
    from gpuemu_ci.action.baseline import BASELINE_NAME

    if directory is None:
        return None
    for name in (BASELINE_NAME, "results.json"):
        found = sorted(directory.rglob(name))
        if found:
            return found[0]
    return None
