"""The explain probes: further calls of the op, made only in the explain re-run of a recorded failure (a
`CaseSpec` with `explain`), each with one setting of the Triton layer changed, that say which kernel line made
the failing elements wrong. A probe is a module with a `probe` function; `EXPLAIN_PROBES` lists them.

A probe gets the op's spec, the layer's report of the judged call, the judged call's result, and a `Caller`
(the op called again on the same inputs with some `CallSettings` changed); it returns what it found
(`Explained`: the line, what it says, and for a what-if the outputs the judge must find fixed) and whether the
worker must retire. Probes never change a verdict: the judged call's outputs and findings are the case's.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpuemu_ci.backends.layer_probes import Caller
from gpuemu_ci.calls import CallResult
from gpuemu_ci.config.model import OpSpec
from gpuemu_ci.triton_cpu.report import Explained, TritonReport

FAILED = "failed"  # an Explained that says a probe could not run (the layer's own error)
MAX_OUTPUT_BYTES = 1 << 26  # a what-if's outputs that travel to the judge at most (the rest: not sent)

Probe = Callable[[OpSpec, TritonReport, CallResult, Caller], tuple[tuple[Explained, ...], bool]]

EXPLAIN_PROBES: tuple[Probe, ...] = ()


def run(
    op: OpSpec, seen: TritonReport, judged: CallResult, call: Caller
) -> tuple[tuple[Explained, ...], bool]:
    """Every explain probe on the judged call (which succeeded): what they found, and whether the worker must
    retire (then no further probe runs)."""
    found: list[Explained] = []
    for probe in EXPLAIN_PROBES:
        more, retire = probe(op, seen, judged, call)
        found.extend(more)
        if retire:
            return tuple(found), True
    return tuple(found), False


def output_bytes(result: CallResult, like: CallResult) -> tuple[bytes, ...] | None:
    """A what-if call's outputs as an `Explained` carries them, or None where they cannot stand for the judged
    call's (another count, shape or dtype) or are too large to send."""
    if len(result.outputs) != len(like.outputs):
        return None
    sent = []
    for got, judged in zip(result.outputs, like.outputs, strict=True):
        a, b = np.asarray(got), np.asarray(judged)
        if a.shape != b.shape or a.dtype != b.dtype:
            return None
        sent.append(np.ascontiguousarray(a).tobytes())
    return tuple(sent) if sum(len(b) for b in sent) <= MAX_OUTPUT_BYTES else None
