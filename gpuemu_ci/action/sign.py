"""Mode `sign`: sign an existing results file in a job that runs no code under test."""

from __future__ import annotations

from gpuemu_ci.action.step import ActionStep
from gpuemu_ci.errors import ExitCode


def run(step: ActionStep) -> int:
    """Mode `sign`: signs the results file an earlier step wrote (signing_key required) and writes the report;
    exit 0."""
    step.write_report(step.results_path(), sign=True)
    return int(ExitCode.PASSED)
