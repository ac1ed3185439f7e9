"""Mode `baseline` (pushes to the default branch): run, publish, and write baseline.json for upload as the
`gpuemu-baseline` artifact that pull requests are compared with."""

from __future__ import annotations

from gpuemu_ci.action.step import ActionStep
from gpuemu_ci.diff.baseline import baseline_of
from gpuemu_ci.files import atomic_write
from gpuemu_ci.results.codec import to_json

BASELINE_NAME = "baseline.json"


def run(step: ActionStep) -> int:
    """Mode `baseline`: runs the gate, publishes it without a PR comment, and writes the baseline file for
    later runs to diff against; returns the gate's exit code."""
    results = step.run_gate(step.config())
    code = step.publish(results, comment=False)
    atomic_write(step.out_dir / BASELINE_NAME, to_json(baseline_of(results)))
    return code
