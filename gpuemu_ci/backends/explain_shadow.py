"""The float64 shadow of an explain re-run (triton_cpu/shadow.py), in a call of its own after the judged one.

The judged call runs as the failing run did (every program at once where it can) and maps its outputs to their
stores. The judge reads the shadow's findings in one order (backends/explain.py): the program that stored the worst
element, then those that stored elements over their allowance, the largest error first, and takes the first
finding. So the shadow call follows the programs in that order (`CaseSpec.explain_focus`, found in
the judged call's store map), at most `MAX_FOLLOWED` of them, each alone, and stops at the first that has a
finding; the others run as any call runs them, all at once where they can. A shadow of every program, one at a
time, costs 50 calls and more: on a RoPE launch of 2,048 programs, 18 s a failure.

It follows every program, as before and as `replay --explain` does, where the judged call returned a NaN or an
infinity (the first non-finite value made from finite operands is the call's first, in whichever program: the
explain probe that names it, nonfinite_probe.py, reads it from this call), and where no program is known (no worst
element, or no map of the failing output: "where" then names the program that parted most). It runs no shadow
where the failing output's map shows that no watched store wrote its worst element or any element over its
allowance (torch wrote them, or another kernel): the judge reads findings of those programs only, so there would
be none to read, and a shadow of every program cost 3.5 s on a RoPE failure of 133 programs. The shadow call's
outputs are not judged: the judged call's are."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from gpuemu_ci.backends.explain import MAX_OVER, over_from_mask
from gpuemu_ci.backends.interface import CaseSpec, ExplainFocus
from gpuemu_ci.backends.nonfinite_probe import holds_nonfinite
from gpuemu_ci.calls import CallResult
from gpuemu_ci.triton_cpu.report import TritonReport
from gpuemu_ci.triton_cpu.where import StoreMap, follow_order

# Programs the shadow follows at most before it gives up: where none of the worst element's and the worst
# errors' programs parts from float64, the failure is the same wrong code in float64 (a logic bug).
MAX_FOLLOWED = 8

# The op called again on the same inputs with the layer's settings changed: its result, whether the worker must
# retire, and the layer's report of that call.
ShadowCaller = Callable[..., tuple[CallResult, bool, TritonReport | None]]


def shadowed(
    judged: TritonReport, result: CallResult, spec: CaseSpec, call: ShadowCaller
) -> tuple[TritonReport, bool]:
    """The judged call's report (`judged`, of the call that returned `result`) with what the shadow call found, and
    whether the worker must retire."""
    focus = spec.explain_focus or ExplainFocus()
    programs = follow_order(judged.stores, focus.worst, focus.over, focus.shape)
    nonfinite = holds_nonfinite(result)
    if not programs and not nonfinite and _written_elsewhere(judged.stores, focus):
        return judged, False
    every = not programs or nonfinite
    _, retire, seen = call(shadow64=True, shadow_programs=None if every else programs[:MAX_FOLLOWED])
    if seen is None:
        return judged, retire
    found = msgspec.structs.replace(
        judged, shadow=seen.shadow, shadowed=seen.shadowed, first_nonfinite=seen.first_nonfinite
    )
    return found, retire


def _written_elsewhere(maps: tuple[StoreMap | None, ...], focus: ExplainFocus) -> bool:
    """Whether the map the judge reads (a forward output's: the first with its shape) exists while no watched store
    of any map of that shape wrote the worst element or an element over its allowance: `follow_order` found no
    program for those `over` names, and it named them all, or the mask of them all shows no such store."""
    if focus.gradient or focus.shape is None:
        return False
    shape = tuple(focus.shape)
    same = [m for m in maps if m is not None and m.shape == shape]
    if not same:
        return False
    if len(focus.over) < MAX_OVER:
        return True
    over = over_from_mask(focus.over_mask, shape)
    return over is not None and not any(m.wrote_any(over) for m in same)
