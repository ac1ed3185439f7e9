"""Failure records of results.json: what a failing case was, why, its snapshot and its replay command.

The judge process describes a case that did not pass (and writes its input snapshot); this adds what only
the gate knows: the case's id and how to replay it from where the command ran.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from gpuemu_ci.calls import CaseReport
from gpuemu_ci.config.model import Config
from gpuemu_ci.plan.model import CaseRef
from gpuemu_ci.results.model import Failure, FailureKind


def failure_record(config: Config, ref: CaseRef, report: CaseReport) -> Failure:
    """The results entry of a failing (or unjudgeable) case."""
    kinds = {k.value for k in FailureKind}
    kind = FailureKind(report.kind) if report.kind in kinds else FailureKind.RAISED
    # A failing gradient's figures are the gradient's own: the forward's (which may have passed) would say
    # 0.04 beside a message that says 92x.
    gradient = next((g for g in report.gradients if report.output == f"grad of {g.of}"), None)
    figures = report if gradient is None else gradient
    return Failure(
        case_id=ref.case_id,
        case_index=ref.index,
        case_seed=ref.seed,
        dtype=report.dtype,
        shapes=dict(report.shapes),
        strides=dict(report.strides),
        layouts=dict(report.layouts),
        kwargs=dict(report.kwargs),
        distribution=report.distribution,
        kind=kind,
        message=report.message,
        comparator=report.comparator,
        headroom=figures.headroom,
        max_abs_error=figures.max_abs_error,
        worst_index=figures.worst_index,
        exceeded=figures.exceeded,
        total=figures.total,
        snapshot=report.snapshot,
        replay=replay_command(config, ref.op, ref.seed, ref.snapshot),
        origin=ref.origin,
        stderr_tail=report.stderr_tail,
        errored=report.outcome == "errored",
        snapshot_error=report.snapshot_error,
        output=report.output,
        inputs_digest=report.inputs_digest,
        party=report.party or ("op" if report.outcome == "failed" else None),
        pattern=report.pattern,
        error_map=report.error_map,
        error_map_note=report.error_map_note,
        where=report.where,
    )


def replay_command(config: Config, op_name: str, seed: int, snapshot: Path | None = None) -> str:
    """The `gpuemu-ci replay` command line that re-runs one case, paths relative to the working directory so
    it can be pasted where the run ran."""
    # Relative to where the command ran (the repository root in Actions), so it is copy-pasteable there.
    config_arg = os.path.relpath(config.path, Path.cwd())
    command = f"gpuemu-ci replay --config {shlex.quote(config_arg)} --op {shlex.quote(op_name)}"
    if snapshot is not None:  # a corpus case: its inputs are the pinned file, not the generator's
        return f"{command} --snapshot {shlex.quote(os.path.relpath(snapshot, Path.cwd()))}"
    return f"{command} --seed {seed}"
