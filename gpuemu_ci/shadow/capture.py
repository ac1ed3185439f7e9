"""Captures: the exact inputs of a call that failed a shadow check, as an input snapshot that
`gpuemu-ci replay --snapshot` replays and `gpuemu-ci corpus add` pins into the regression corpus."""

from __future__ import annotations

import json
import platform
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from gpuemu_ci import __version__
from gpuemu_ci.clock import utc_now
from gpuemu_ci.config.model import OpSpec
from gpuemu_ci.fuzz.values import GENERATOR_VERSION
from gpuemu_ci.oracle.model import CaseVerdict
from gpuemu_ci.plan.model import ValueMode
from gpuemu_ci.results.snapshots import write_snapshot
from gpuemu_ci.shadow.spec import dims_of


def write_capture(
    directory: Path,
    op: OpSpec,
    inputs: Mapping[str, np.ndarray],
    strides: Mapping[str, tuple[int, ...]],
    kwargs: Mapping[str, Any],
    verdict: CaseVerdict,
    *,
    reason: str,
) -> Path:
    """Writes the capture; returns its path."""
    dtype = next(
        (a.dtype.name for a in inputs.values() if a.dtype.kind == "f" or a.dtype.name == "bfloat16"), ""
    )
    meta = {
        "op": op.name,
        "origin": "shadow",
        "case_seed": 0,
        "case_index": -1,
        "master_seed": 0,
        "generator_version": GENERATOR_VERSION,
        "dtype": dtype or (op.output_dtype or op.dtypes[0]),
        "mode": ValueMode.CAPTURED.value,
        "dims": dims_of(op, inputs) or {},
        "kwargs": {name: value for name, value in kwargs.items() if _json_value(value)},
        "layouts": {name: {"layout": "captured", "broadcast_dim": None} for name in inputs},
        "strides": {name: list(s) for name, s in strides.items()},
        "input_order": list(inputs),
        "verdict": "\n".join(f"{f.kind.value}: {f.message}" for f in verdict.findings),
        "why_checked": reason,
        "captured_at": utc_now(),
        "environment": _environment(),
    }
    return directory / write_snapshot(directory, dict(inputs), meta)


def _json_value(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _environment() -> dict[str, Any]:
    torch = sys.modules.get("torch")
    return {
        "gpuemu_ci": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": getattr(torch, "__version__", None),
        "platform": platform.platform(),
    }


CHECKER_ERRORS = "checker-errors.jsonl"


def record_checker_error(directory: Path, op: str, where: str, error: str, count: int) -> None:
    """Appends one line for a call the checker itself failed on (it was not judged). Best effort: the caller's
    run goes on when the directory cannot be written, and the count and the warning still say it."""
    line = {"op": op, "where": where, "error": error, "count": count, "at": utc_now()}
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with (directory / CHECKER_ERRORS).open("a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")
    except OSError:
        pass
