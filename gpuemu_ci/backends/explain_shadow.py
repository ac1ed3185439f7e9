"""The float64 shadow of an explain re-run (triton_cpu/shadow.py), in a call of its own after the judged one.

The judged call runs as the failing run did (every program at once where it can) and maps its outputs to their
stores; the shadow call then follows, one at a time, every program of a launch of at most `shadow.FOLLOW_WHOLE`
programs, and of a larger launch only the programs that stored the failure's worst element (`CaseSpec.explain_worst`,
found in that map), running the others as any call does. The judge reads the shadow of the program that stored the
worst element first (backends/explain.py); a shadow of every program, one at a time, costs 50 calls and more, which
on a grid of thousands of programs is tens of seconds a failure. Where no program is known (no worst element, or
none a watched store wrote: "where" then names the program that parted most), the shadow follows every program, as
`replay --explain` does. The shadow call's outputs are not judged: the judged call's are."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from gpuemu_ci.calls import CallResult
from gpuemu_ci.triton_cpu.report import TritonReport
from gpuemu_ci.triton_cpu.where import stored_by

# The op called again on the same inputs with the layer's settings changed: its result, whether the worker must
# retire, and the layer's report of that call.
ShadowCaller = Callable[..., tuple[CallResult, bool, TritonReport | None]]


def shadowed(
    judged: TritonReport, worst: tuple[int, ...] | None, call: ShadowCaller
) -> tuple[TritonReport, bool]:
    """The judged call's report with what the shadow call found, and whether the worker must retire."""
    programs = stored_by(judged.stores, worst)
    _, retire, seen = call(shadow64=True, shadow_programs=programs or None)
    if seen is None:
        return judged, retire
    found = msgspec.structs.replace(
        judged, shadow=seen.shadow, shadowed=seen.shadowed, first_nonfinite=seen.first_nonfinite
    )
    return found, retire
