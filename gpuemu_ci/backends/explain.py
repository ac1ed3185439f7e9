"""What the judge adds to a failing case to explain it: the one-line pattern of its errors (oracle/error_pattern.py)
and its error map beside the snapshot (results/error_map.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import msgspec
import numpy as np

from gpuemu_ci.calls import CaseReport
from gpuemu_ci.oracle import error_pattern
from gpuemu_ci.oracle.model import ErrorStats
from gpuemu_ci.results import error_map


def explained(
    report: CaseReport,
    stats: ErrorStats | None,
    dims: Mapping[str, int],
    out_dir: Path | None,
    tiles: Mapping[int, int] | None = None,
) -> CaseReport:
    """`report` (a failed case) with its pattern and error map (written under `out_dir`, when given). `tiles`:
    the kernel's block size along the output's last axes (-1, -2), where known."""
    if report.outcome != "failed" or stats is None or stats.ratio is None or report.output is not None:
        return report  # nothing measured per element (a crash, an argmax), or a gradient's failure
    ratio = np.asarray(stats.ratio)
    pattern = error_pattern.describe(ratio, dims, tiles)
    path, note = error_map.write_error_map(out_dir, ratio, tiles) if out_dir is not None else (None, None)
    return msgspec.structs.replace(report, pattern=pattern, error_map=path, error_map_note=note)
