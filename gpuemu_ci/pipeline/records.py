"""Failure records of results.json: what a failing case was, why, its snapshot and its replay command."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpuemu_ci.backends.interface import CallStatus, CaseRun
from gpuemu_ci.config.model import Config, OpSpec
from gpuemu_ci.fuzz.case import CaseInputs
from gpuemu_ci.fuzz.values import GENERATOR_VERSION
from gpuemu_ci.oracle.model import CaseVerdict, ErrorStats, FailureKind
from gpuemu_ci.plan.model import CaseRef
from gpuemu_ci.results.base import json_float
from gpuemu_ci.results.model import Failure
from gpuemu_ci.results.snapshots import write_snapshot


@dataclass
class CaseOutcome:
    ref: CaseRef
    inputs: CaseInputs
    run: CaseRun
    verdict: CaseVerdict | None  # None: the case could not be judged (reference failed)
    naive_output: np.ndarray | None = None


# Failures where the op's own stderr says what happened.
_RAN_INTO_TROUBLE = frozenset({FailureKind.CRASHED, FailureKind.TIMEOUT, FailureKind.OOM, FailureKind.RAISED})


def failure_record(
    config: Config, op: OpSpec, master_seed: int, out_dir: Path, outcome: CaseOutcome
) -> Failure:
    """The results entry of a failing (or unjudgeable) case, with its input snapshot written to out_dir."""
    case = outcome.inputs
    described = case.describe()
    stats: ErrorStats | None = outcome.verdict.stats if outcome.verdict else None
    if outcome.verdict is None:
        failed_call = (
            outcome.run.reference if outcome.run.reference.status is not CallStatus.OK else outcome.run.op
        )
        kind = (
            FailureKind(failed_call.status.value)
            if failed_call.status.value in set(FailureKind)
            else FailureKind.RAISED
        )
        message = f"the reference {failed_call.status.words}: {failed_call.message}"
        stderr = failed_call.stderr_tail or None
        errored = True
    else:
        finding = outcome.verdict.primary
        kind = finding.kind if finding else FailureKind.MISMATCH
        message = "\n".join(f.message for f in outcome.verdict.findings)
        stderr = outcome.run.op.stderr_tail or None if kind in _RAN_INTO_TROUBLE else None
        errored = False
    snapshot, snapshot_error = None, None
    try:
        snapshot = write_snapshot(out_dir, dict(case.logical), snapshot_meta(op, master_seed, outcome))
    except OSError as exc:  # a full or read-only disk costs the snapshot, never the results
        snapshot_error = f"{exc.strerror or exc}"
    return Failure(
        case_id=outcome.ref.case_id,
        case_index=outcome.ref.index,
        case_seed=outcome.ref.seed,
        dtype=case.dtype,
        shapes=described["shapes"],
        strides=described["strides"],
        layouts=described["layouts"],
        kwargs=dict(case.kwargs),
        distribution=case.stratum.mode.value,
        kind=kind,
        message=message,
        comparator=stats.comparator.value if stats else None,
        headroom=json_float(stats.headroom) if stats else None,
        max_abs_error=json_float(stats.max_abs_error) if stats else None,
        worst_index=tuple(stats.worst_index) if stats and stats.worst_index is not None else None,
        exceeded=stats.exceeded if stats else None,
        total=stats.total if stats else None,
        snapshot=snapshot,
        replay=replay_command(config, op.name, outcome.ref.seed),
        stderr_tail=stderr,
        errored=errored,
        snapshot_error=snapshot_error,
    )


def snapshot_meta(op: OpSpec, master_seed: int, outcome: CaseOutcome) -> dict[str, Any]:
    """What a snapshot records besides the inputs: enough to rebuild and replay the case."""
    case = outcome.inputs
    return {
        "op": op.name,
        "case_seed": outcome.ref.seed,
        "case_index": outcome.ref.index,
        "master_seed": master_seed,
        "generator_version": GENERATOR_VERSION,
        "dtype": case.dtype,
        "mode": case.stratum.mode.value,
        "dims": dict(case.dims),
        "kwargs": dict(case.kwargs),
        "layouts": {
            name: {"layout": c.layout.value, "broadcast_dim": c.broadcast_dim}
            for name, c in case.layouts.items()
        },
        "input_order": list(case.logical),
    }


def replay_command(config: Config, op_name: str, seed: int) -> str:
    # Relative to where the command ran (the repository root in Actions), so it is copy-pasteable there.
    config_arg = os.path.relpath(config.path, Path.cwd())
    return f"gpuemu-ci replay --config {shlex.quote(config_arg)} --op {shlex.quote(op_name)} --seed {seed}"
