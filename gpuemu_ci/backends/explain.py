"""What the judge adds to a failing case to explain it: the one-line pattern of its errors (oracle/error_pattern.py),
its error map beside the snapshot (results/error_map.py), and for a Triton kernel where its worst element was
stored (the program, lane and line, triton_cpu/where.py), whose programs' tiles also mark the map."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from pathlib import Path

import msgspec
import numpy as np

from gpuemu_ci.calls import CaseReport
from gpuemu_ci.oracle import error_pattern
from gpuemu_ci.oracle.model import ErrorStats
from gpuemu_ci.results import error_map
from gpuemu_ci.triton_cpu.report import MASKED_LANES, PROGRAM_ORDER, TF32, Explained, TritonReport
from gpuemu_ci.triton_cpu.shadow import ShadowFinding
from gpuemu_ci.triton_cpu.where import StoreMap

# Elements over their allowance a failure names for its explain re-run's shadow (CaseReport.over): enough to reach
# the few programs it follows before one explains the failure.
MAX_OVER = 4096
# Where more are over, a bit mask says which (CaseReport.over_mask), for outputs of at most this many elements (a
# 2 MiB mask before compression).
MASK_LIMIT = 1 << 24

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
        return found_by_layer(report, triton, explain)  # nothing measured per element (a crash, an argmax)
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
    probed = (
        _probed(_for(triton, report), ratio > 1.0, rejudge)
        if explain and triton is not None and report.output is None
        else []
    )
    decided = _decided_at(triton, position, ratio.shape, stats.worst_index)
    parted = _parted_at(triton, stored, ratio, stats.worst_index)
    found = [*probed, where, decided, parted]  # the cause first: the comment shows one line
    causes = tuple(filter(None, [*probed, decided, parted]))
    path, note = error_map.write_error_map(out_dir, ratio, tiles) if out_dir is not None else (None, None)
    rerun_wanted = (
        triton is not None and not explain
    )  # its explain re-run's shadow follows them (CaseReport.over)
    return msgspec.structs.replace(
        report,
        pattern=pattern,
        error_map=path,
        error_map_note=note,
        where="; ".join(filter(None, found)) or None,
        causes=causes,
        over=over_order(ratio) if rerun_wanted else (),
        over_shape=tuple(ratio.shape) if rerun_wanted else None,
        over_mask=over_mask(ratio) if rerun_wanted else b"",
    )


def over_order(ratio: np.ndarray) -> tuple[int, ...]:
    """The flat indices of the elements over their allowance (`ratio` > 1), the largest first (ties in index
    order, as `StoreMap.programs_over` ranks them), at most MAX_OVER of them."""
    flat = np.asarray(ratio, dtype=np.float64).reshape(-1)
    over = np.flatnonzero(flat > 1.0)
    if over.size > MAX_OVER:
        over = np.sort(over[np.argpartition(-flat[over], MAX_OVER - 1)[:MAX_OVER]])
    ranked = over[np.argsort(-flat[over], kind="stable")]
    return tuple(int(i) for i in ranked)


def over_mask(ratio: np.ndarray) -> bytes:
    """Every element over its allowance (`ratio` > 1) as a compressed bit mask in C order, where MAX_OVER or more are
    (`over_order` names at most MAX_OVER: the largest); empty where fewer are, or past MASK_LIMIT elements."""
    flat = np.asarray(ratio, dtype=np.float64).reshape(-1)
    if flat.size > MASK_LIMIT:
        return b""
    over = flat > 1.0
    if int(np.count_nonzero(over)) < MAX_OVER:
        return b""
    return zlib.compress(np.packbits(over).tobytes())


def over_from_mask(mask: bytes, shape: tuple[int, ...]) -> np.ndarray | None:
    """`over_mask`'s elements as a boolean array of `shape` (None: no mask was sent)."""
    if not mask:
        return None
    size = int(np.prod(shape)) if shape else 1
    bits = np.frombuffer(zlib.decompress(mask), dtype=np.uint8)
    return np.unpackbits(bits, count=size).astype(bool).reshape(shape)


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


def _parted_at(
    triton: TritonReport | None, stored: StoreMap | None, ratio: np.ndarray, index: tuple[int, ...] | None
) -> str | None:
    """Where the float64 shadow run (triton_cpu/shadow.py) saw the kernel first part from float64: in the program
    that stored the worst element, else in the first program (largest error first) that stored an element over
    its allowance; in the program that parted most where no map says which. Nothing where those programs agreed
    with their shadows within rounding."""
    if triton is None or not triton.shadow:
        return None
    if stored is None:
        return triton.shadow[0].describe()
    findings = {(f.kernel, f.pid): f for f in triton.shadow}
    worst = stored.program_at(tuple(index)) if index is not None else None
    for program in ([worst] if worst is not None else []) + stored.programs_over(ratio):
        found: ShadowFinding | None = findings.get(program)
        if found is not None:
            return found.describe()
    return None


def _probed(found: tuple[Explained, ...], bad: np.ndarray, rejudge: Rejudge | None) -> list[str]:
    """What the explain probes found that holds: a finding without outputs as it is; the what-ifs of one line
    only where exactly one of them fixes the failing elements (its outputs, judged with the case's reference,
    pass or bring every element over its allowance within it). Where several of a line's values fix them, the
    failing elements depend on the masked lanes only through something else gone wrong (a row of zeros whose
    norm divides by 0 comes out right whatever makes the norm nonzero): the line is not named."""
    said: list[str] = []
    fixes: dict[tuple[str, str], list[str]] = {}
    for item in found:
        if not item.outputs:
            said.append(item.text)
            continue
        fixing = fixes.setdefault((item.by, item.site), [])
        if rejudge is not None and _fixes(rejudge(item), bad):
            fixing.append(item.text)
    return said + [texts[0] for texts in fixes.values() if len(texts) == 1]


def _fixes(rejudged: tuple[np.ndarray | None, bool], bad: np.ndarray) -> bool:
    ratio, passed = rejudged
    return passed or (ratio is not None and ratio.shape == bad.shape and bool(np.all(ratio[bad] <= 1.0)))


def found_by_layer(report: CaseReport, triton: TritonReport | None, explain: bool) -> CaseReport:
    """A failure without figures per element (the kernel stopped at an out-of-bounds access) with what the explain
    re-run's layer and probes found that stands on its own (the lines an out-of-bounds pointer was offset at)."""
    if not explain or triton is None or report.outcome != "failed":
        return report
    said = [item.text for item in _for(triton, report) if not item.outputs]
    if not said:
        return report
    where = "; ".join(filter(None, [report.where, *said]))
    return msgspec.structs.replace(report, where=where, causes=tuple(said))


def _for(triton: TritonReport, report: CaseReport) -> tuple[Explained, ...]:
    """What the explain re-run found that explains a failure of this kind."""
    return tuple(e for e in triton.explained if not e.kinds or report.kind in e.kinds)
