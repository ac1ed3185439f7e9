"""What the judge adds to a failing case to explain it: the one-line pattern of its errors (oracle/error_pattern.py),
its error map beside the snapshot (results/error_map.py), and for a Triton kernel where its worst element was
stored (the program, lane and line, triton_cpu/where.py), whose programs' tiles also mark the map."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import msgspec
import numpy as np

from gpuemu_ci.calls import CaseReport
from gpuemu_ci.oracle import error_pattern
from gpuemu_ci.oracle.model import ErrorStats
from gpuemu_ci.results import error_map
from gpuemu_ci.triton_cpu.report import TritonReport
from gpuemu_ci.triton_cpu.where import StoreMap


def explained(
    report: CaseReport,
    stats: ErrorStats | None,
    dims: Mapping[str, int],
    out_dir: Path | None,
    triton: TritonReport | None = None,
) -> CaseReport:
    """`report` (a failed case) with its pattern, error map (written under `out_dir`, when given) and, for a case
    whose Triton launches the layer watched, where its worst element was stored."""
    if report.outcome != "failed" or stats is None or stats.ratio is None or report.output is not None:
        return report  # nothing measured per element (a crash, an argmax), or a gradient's failure
    ratio = np.asarray(stats.ratio)
    stored = _map_of(triton, ratio.shape)
    tiles = stored.tiles() if stored is not None else {}
    pattern = error_pattern.describe(ratio, dims, tiles)
    where = None
    if stored is not None:
        if stored.partial_only(ratio > 1.0):
            pattern += "; only where the store's mask is partial"
        if stats.worst_index is not None:
            where = stored.describe(tuple(stats.worst_index))
    elif triton is not None and triton.launches:
        where = triton.stores_note or "where not recorded: no output of the call matched a watched store"
    path, note = error_map.write_error_map(out_dir, ratio, tiles) if out_dir is not None else (None, None)
    return msgspec.structs.replace(report, pattern=pattern, error_map=path, error_map_note=note, where=where)


def _map_of(triton: TritonReport | None, shape: tuple[int, ...]) -> StoreMap | None:
    """The store map of the judged output: the first of the op's outputs with its shape."""
    if triton is None:
        return None
    return next((m for m in triton.stores if m is not None and m.shape == tuple(shape)), None)
