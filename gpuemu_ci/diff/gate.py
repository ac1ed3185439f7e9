"""The gate: whether regressions fail the run, and what that does to the document's verdict and exit code."""

from __future__ import annotations

import copy
from typing import Any

from gpuemu_ci.config.model import Policies
from gpuemu_ci.diff.model import BaselineDiff
from gpuemu_ci.errors import ExitCode


def fail_on_regression(policies: Policies, flag: bool | None) -> bool:
    """The command-line flag wins over `policies.fail_on_regression`."""
    return policies.fail_on_regression if flag is None else flag


def diff_exit_code(diff: BaselineDiff) -> ExitCode:
    """`gpuemu-ci diff`: 1 when a regression fails the gate, else 0 (unreadable input exits 2 before)."""
    return ExitCode.GATE_FAILED if diff.gate_failed else ExitCode.PASSED


def gate_document(document: dict[str, Any], diff: BaselineDiff) -> dict[str, Any]:
    """A copy of the results document with its `diff` section set and, when a regression fails the gate,
    verdict "failed" and exit code 1.

    A config error (exit 2) stays 2: the run itself was wrong. An infrastructure exit (3) becomes 1, as in
    the run's own verdict, where a found failure outranks an incomplete run."""
    out = copy.copy(document)
    out["diff"] = diff.to_json()
    if not diff.gate_failed:
        return out
    if int(out.get("exit_code", 0)) != int(ExitCode.USAGE):
        out["exit_code"] = int(ExitCode.GATE_FAILED)
        out["verdict"] = "failed"
    n = diff.regressions
    out["notes"] = [
        *out.get("notes", []),
        f"the gate failed on {n} regression{'s' if n != 1 else ''} against "
        "the baseline (policies.fail_on_regression)",
    ]
    return out
