"""Which of an op's output elements a setting of the Triton layer decided: the op called again on the same
inputs with that one setting changed, its outputs compared bit for bit with the judged call's.

- masked lanes: loads without `other` that had masked-off lanes read poison (NaN, +Inf, -Inf; loud integers)
  instead of the 0 the GPU reads (or 0 instead of poison, when the judged call poisoned them). Elements that
  change depend on lanes Triton leaves undefined: `[ops.triton] undefined_masked_lanes` says what that does.
  With several such loads, each is then poisoned alone to name the ones that matter.
- program order: the launches' programs in their plain order instead of the seeded permutation, for calls
  whose kernels ran atomics (the only way programs of a launch may legitimately depend on their order).
- TF32: every fp32 `tl.dot` at full precision, for families whose bound does not allow for TF32 inputs.

A probe runs only when its setting was met (a masked load, an atomic, a TF32 dot), never for `ignore`. When
it changes something, the judged call is repeated as it was: outputs that change then too come from the op
itself (it is not deterministic), and the probe proves nothing. A probe whose call fails where the judged
call did not decided every element. What a probe's call found (bounds, races) is not reported: the judged
call's findings are the case's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuemu_ci.calls import CallResult, CallStatus
from gpuemu_ci.config.model import Family, MaskedLanes, OpSpec
from gpuemu_ci.triton_cpu.layer import POISON, ZERO
from gpuemu_ci.triton_cpu.report import MASKED_LANES, PROGRAM_ORDER, TF32, Decided, TritonReport

MAX_ATTRIBUTED = 4  # loads poisoned one at a time to name the ones that matter (more: all are named)
_TF32_FAMILIES = (Family.MATMUL, Family.ATTENTION)  # their bounds allow for TF32 inputs (oracle/bounds.py)

# A call of the op with some of the layer's settings changed (CallSettings fields): its result, and whether
# the worker's state is unusable after it (then no further call is made).
Caller = Callable[..., tuple[CallResult, bool]]


@dataclass(frozen=True)
class _Probe:
    by: str
    settings: dict[str, Any]
    sites: tuple[str, ...] = ()


def wanted(op: OpSpec, seen: TritonReport) -> list[_Probe]:
    """The probes the judged call's report calls for."""
    probes = []
    mode = op.execution.triton_masked_lanes
    if seen.undefined_lanes and mode is not MaskedLanes.IGNORE:
        other = ZERO if seen.masked_lanes == POISON else POISON
        probes.append(_Probe(MASKED_LANES, {"masked_lanes": other}, seen.undefined_lanes))
    if seen.atomics:
        probes.append(_Probe(PROGRAM_ORDER, {"seeded_order": False}))
    if seen.dot_sites and op.error_model.family not in _TF32_FAMILIES:
        probes.append(_Probe(TF32, {"ieee_dots": True}, tuple(site for site, _ in seen.dot_sites)))
    return probes


def run(op: OpSpec, seen: TritonReport, judged: CallResult, call: Caller) -> tuple[tuple[Decided, ...], bool]:
    """The probes of the judged call (which succeeded): what each decided, and whether the worker must retire."""
    found: list[Decided] = []
    for probe in wanted(op, seen):
        result, retire = call(**probe.settings)
        if retire:
            return tuple(found), True
        masks = _changed(judged, result)
        if masks is not None and any(m.any() for m in masks) and result.status is CallStatus.OK:
            again, retire = call()  # the judged call's settings: is the op deterministic by itself?
            if retire:
                return tuple(found), True
            unsteady = _changed(judged, again)
            if unsteady is None or any(m.any() for m in unsteady):
                continue
        if masks is None or not any(m.any() for m in masks):
            continue
        sites = probe.sites
        if probe.by == MASKED_LANES and 1 < len(sites) <= MAX_ATTRIBUTED:
            sites, retire = _attributed(seen, judged, sites, call)
            if retire:
                return tuple(found), True
        found.append(_decided(probe.by, sites, masks))
    return tuple(found), False


def _attributed(
    seen: TritonReport, judged: CallResult, sites: tuple[str, ...], call: Caller
) -> tuple[tuple[str, ...], bool]:
    """The masked loads whose lanes change the outputs alone (all of them, when none does alone)."""
    baseline = judged
    if seen.masked_lanes == POISON:  # compare with the 0 the GPU reads
        baseline, retire = call(masked_lanes=ZERO)
        if retire or baseline.status is not CallStatus.OK:
            return sites, retire
    named = []
    for site in sites:
        result, retire = call(masked_lanes=POISON, poison_sites=frozenset({site}))
        if retire:
            return sites, True
        masks = _changed(baseline, result)
        if masks is None or any(m.any() for m in masks):
            named.append(site)
    return (tuple(named) or sites), False


def _changed(judged: CallResult, probe: CallResult) -> list[np.ndarray] | None:
    """Per output of the judged call, the elements whose bits differ in the probe's (all of them where the
    probe failed or returned another shape or type); None when the judged call gave no outputs to compare."""
    if judged.status is not CallStatus.OK:
        return None
    masks = []
    for position, y in enumerate(judged.outputs):
        y = np.asarray(y)
        other = np.asarray(probe.outputs[position]) if position < len(probe.outputs) else None
        if (
            probe.status is not CallStatus.OK
            or other is None
            or other.shape != y.shape
            or other.dtype != y.dtype
        ):
            masks.append(np.ones(y.shape, dtype=bool))
            continue
        a = np.ascontiguousarray(y).reshape(-1).view(np.uint8).reshape(y.size, -1)
        b = np.ascontiguousarray(other).reshape(-1).view(np.uint8).reshape(y.size, -1)
        masks.append((a != b).any(axis=1).reshape(y.shape))
    return masks


def _decided(by: str, sites: tuple[str, ...], masks: list[np.ndarray]) -> Decided:
    packed = tuple(np.packbits(m.reshape(-1)).tobytes() if m.any() else b"" for m in masks)
    return Decided(by, sites, packed, tuple(int(m.sum()) for m in masks))
