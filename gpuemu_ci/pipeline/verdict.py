"""The gate's decision, in one place: ops, kernels, a cut-short run and the baseline diff -> verdict and exit
code (errors.ExitCode; README "Exit codes"). Never "passed" when nothing ran or when the run was cut short."""

from __future__ import annotations

from collections.abc import Sequence

from gpuemu_ci.errors import ExitCode
from gpuemu_ci.results.diff import BaselineDiff
from gpuemu_ci.results.kernels import KernelResult, KernelStatus
from gpuemu_ci.results.model import OpResult, OpStatus, Verdict, skipped_count


def decide(
    ops: Sequence[OpResult],
    kernels: Sequence[KernelResult],
    *,
    cut_short: bool,
    lint_unavailable: bool = False,
    diff: BaselineDiff | None = None,
    skips_allowed: bool = False,
) -> tuple[Verdict, ExitCode]:
    """2: an op or reference that does not load (the config is wrong); 1: a failure, a lint violation or a
    regression that fails the gate; 3: cut short, something could not run, an op or case was skipped (unless
    `skips_allowed`: then it passes "with N skipped"), or nothing ran at all; 0: passed.

    A found failure outranks an incomplete run (1, not 3): what failed is worth more than what is missing."""
    if any(op.import_error for op in ops):
        return Verdict.ERROR, ExitCode.USAGE
    failed = (
        any(k.errors for k in kernels)
        or any(op.status is OpStatus.FAILED for op in ops)
        or any(k.status is KernelStatus.FAILED for k in kernels)
        or (diff is not None and diff.gate_failed)
    )
    if failed:
        return Verdict.FAILED, ExitCode.GATE_FAILED
    if cut_short:
        return Verdict.INCOMPLETE, ExitCode.INFRASTRUCTURE
    errored = any(op.status is OpStatus.ERROR for op in ops) or any(
        k.status is KernelStatus.ERROR for k in kernels
    )
    if lint_unavailable or errored:
        return Verdict.ERROR, ExitCode.INFRASTRUCTURE
    if skipped_count(ops) and not skips_allowed:
        return Verdict.ERROR, ExitCode.INFRASTRUCTURE
    judged = sum(op.cases_total - op.cases_skipped for op in ops)  # skipped cases ran but were not judged
    executed = judged + sum(1 for k in kernels if k.status is KernelStatus.PASSED)
    if executed == 0:
        return Verdict.ERROR, ExitCode.INFRASTRUCTURE
    return Verdict.PASSED, ExitCode.PASSED
