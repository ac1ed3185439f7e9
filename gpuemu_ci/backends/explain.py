"""What the judge adds to a failing case to explain it: the one-line pattern of its errors (oracle/error_pattern.py),
its error map beside the snapshot (results/error_map.py), and for a Triton kernel where its worst element was
stored (the program, lane and line, triton_cpu/where.py), whose programs' tiles also mark the map."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import msgspec
import numpy as np

from gpuemu_ci.calls import CaseReport
from gpuemu_ci.oracle import error_pattern
from gpuemu_ci.oracle.model import ErrorStats
from gpuemu_ci.results import error_map
from gpuemu_ci.triton_cpu.report import MASKED_LANES, PROGRAM_ORDER, TF32, Explained, TritonReport
from gpuemu_ci.triton_cpu.where import StoreMap

# Judges a what-if's outputs (an explain probe's, `Explained.outputs`) with the case's reference: the per-element
# ratio of their failing output (error / allowance), None when they cannot be judged; and whether they passed.
Rejudge = Callable[[Explained], tuple[np.ndarray | None, bool]]


def explained(
    report: CaseReport,
    stats: ErrorStats | None,
    dims: Mapping[str, int],
    out_dir: Path | None,
    triton: TritonReport | None = None,
    gradients: tuple[tuple[str, ErrorStats], ...] = (),
    forward_outputs: int = 1,
    *,
    explain: bool = False,
    rejudge: Rejudge | None = None,
) -> CaseReport:
    """`report` (a failed case) with its pattern, error map (written under `out_dir`, when given) and, in the
    explain re-run (`explain`: the op side logged its stores and ran the explain probes), for a case whose Triton
    launches the layer watched, where its worst element was stored and what the explain probes found (a what-if
    counts only where `rejudge` finds it fixes the failing elements). A failing gradient (`report.output` "grad of
    x") is explained from its own figures (`gradients`, in the order the op returns them after its
    `forward_outputs`)."""
    position: int | None = None
    if report.output is not None:  # a gradient's failure: its figures and its place among the op's outputs
        names = [name for name, _ in gradients]
        of = report.output.removeprefix("grad of ")
        stats = dict(gradients).get(of)
        position = forward_outputs + names.index(of) if of in names else None
    if report.outcome != "failed" or stats is None or stats.ratio is None:
        return report  # nothing measured per element (a crash, an argmax)
    ratio = np.asarray(stats.ratio)
    position, stored = _map_of(triton, ratio.shape, position)
    stored = stored if explain else None  # a store map is the explain re-run's (the first run logs no store)
    tiles = stored.tiles() if stored is not None else {}
    pattern = error_pattern.describe(ratio, dims, tiles)
    where = None
    if stored is not None:
        if stored.partial_only(ratio > 1.0):
            pattern += "; only where the store's mask is partial"
        if stats.worst_index is not None:
            where = stored.describe(tuple(stats.worst_index))
    elif explain and triton is not None and triton.launches:
        where = triton.stores_note or "where not recorded: no output of the call matched a watched store"
    found = [_decided_at(triton, position, ratio.shape, stats.worst_index)]
    if explain and triton is not None and report.output is None:
        found.extend(_probed(triton.explained, ratio > 1.0, rejudge))
    for said in filter(None, found):
        where = f"{where}; {said}" if where else said
    path, note = error_map.write_error_map(out_dir, ratio, tiles) if out_dir is not None else (None, None)
    return msgspec.structs.replace(report, pattern=pattern, error_map=path, error_map_note=note, where=where)


def _map_of(
    triton: TritonReport | None, shape: tuple[int, ...], known: int | None
) -> tuple[int, StoreMap | None]:
    """(the judged output's position among the op's outputs, its store map): the one at `known` when given, else
    the first with its shape."""
    if triton is None:
        return known or 0, None
    if known is not None:
        stored = triton.stores[known] if known < len(triton.stores) else None
        return known, stored if stored is not None and stored.shape == tuple(shape) else None
    for position, stored in enumerate(triton.stores):
        if stored is not None and stored.shape == tuple(shape):
            return position, stored
    return 0, None


# What a probe of the layer varied (backends/layer_probes.py), as the "where" says it.
_VARIED = {
    MASKED_LANES: "its value changes with what the masked-off lanes read:",
    TF32: "its value changes when the fp32 dot runs at full precision instead of TF32:",
    PROGRAM_ORDER: "its value changes with the order of the programs",
}


def _decided_at(
    triton: TritonReport | None, position: int, shape: tuple[int, ...], index: tuple[int, ...] | None
) -> str | None:
    """The kernel lines a probe of the call varied that changed the worst element, where one did: for a masked
    load without `other` or a TF32 dot, the line the bug is on."""
    if triton is None or index is None or len(index) != len(shape):
        return None
    size = int(np.prod(shape)) if shape else 1
    flat = int(np.ravel_multi_index(tuple(index), shape)) if shape else 0
    for decided in triton.decided:
        if decided.by in _VARIED and decided.at(position, size, flat):
            return " ".join(filter(None, (_VARIED[decided.by], ", ".join(decided.sites))))
    return None


def _probed(found: tuple[Explained, ...], bad: np.ndarray, rejudge: Rejudge | None) -> list[str]:
    """What the explain probes found that holds: a finding without outputs as it is; a what-if only where its
    outputs, judged with the case's reference, pass or bring every element over its allowance within it."""
    said = []
    for item in found:
        if not item.outputs:
            said.append(item.text)
            continue
        if rejudge is None:
            continue
        ratio, passed = rejudge(item)
        fixed = ratio is not None and ratio.shape == bad.shape and bool(np.all(ratio[bad] <= 1.0))
        if passed or fixed:
            said.append(item.text)
    return said
