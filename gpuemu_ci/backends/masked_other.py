"""The masked-load `other` what-if (an explain probe, backends/explain_probes.py): for each load whose masked-off
lanes read its `other=` in the failing call (triton_cpu/what_if.py), the op is called again with that load's
masked lanes reading each other reduction-neutral value in turn (0, -inf, +inf, 1: the identities of a sum, a
max, a min and a product), one load at a time. Each call whose outputs differ travels to the judge, which names
the load only where those outputs, judged with the same reference, bring the failing elements within their
allowance, and for exactly one of the values (backends/explain.py): a load whose `other` merely changes the
outputs is never named, nor one that any value would do for (a zero row whose norm divides by zero)."""

from __future__ import annotations

import math

import numpy as np

from gpuemu_ci.backends.layer_probes import Caller
from gpuemu_ci.calls import CallResult, CallStatus
from gpuemu_ci.config.model import OpSpec
from gpuemu_ci.triton_cpu.report import Explained, TritonReport

MASKED_OTHER = "masked_other"
NEUTRAL = (0.0, -math.inf, math.inf, 1.0)
MAX_LOADS = 4  # loads tried, in the order the kernels met them
MAX_OUTPUT_BYTES = 1 << 26  # the what-ifs' outputs that travel to the judge at most, all together


def probe(
    op: OpSpec, seen: TritonReport, judged: CallResult, call: Caller
) -> tuple[tuple[Explained, ...], bool]:
    """The what-ifs whose outputs differ from the judged call's, for the judge to try."""
    found: list[Explained] = []
    budget = MAX_OUTPUT_BYTES
    unchanged = output_bytes(judged, judged)
    for site, other in seen.masked_others[:MAX_LOADS]:
        for value in NEUTRAL:
            if value == other or (math.isnan(value) and math.isnan(other)):
                continue
            result, retire = call(other_override=(site, value))
            if retire:
                return tuple(found), True
            outputs = output_bytes(result, judged)
            if outputs is None or outputs == unchanged or sum(map(len, outputs)) > budget:
                continue
            budget -= sum(map(len, outputs))
            text = (
                f"the load at {site} reads {_spelled(other)} in its masked-off lanes (`other`); reading "
                f"{_spelled(value)} there brings the failing elements within their allowance"
            )
            found.append(Explained(MASKED_OTHER, site, text, outputs))
    return tuple(found), False


def output_bytes(result: CallResult, like: CallResult) -> tuple[bytes, ...] | None:
    """A call's outputs as an `Explained` carries them, or None where they cannot stand for the judged call's
    (the call failed; another count, shape or dtype)."""
    if result.status is not CallStatus.OK or len(result.outputs) != len(like.outputs):
        return None
    sent = []
    for got, judged in zip(result.outputs, like.outputs, strict=True):
        a, b = np.asarray(got), np.asarray(judged)
        if a.shape != b.shape or a.dtype != b.dtype:
            return None
        sent.append(np.ascontiguousarray(a).tobytes())
    return tuple(sent)


def _spelled(value: float) -> str:
    return "-inf" if value == -math.inf else "+inf" if value == math.inf else f"{value:g}"
