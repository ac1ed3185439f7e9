"""The explain probes, run only in the explain re-run of a recorded failure (a `CaseSpec` with `explain`), that say
which kernel line made the failing elements wrong: a what-if calls the op again with one setting of the Triton
layer changed (masked_other.py); another reads what the float64 shadow call noted (nonfinite_probe.py: the first
non-finite value; explain_shadow.py runs that call before the probes). A probe is a module with a `probe` function;
`EXPLAIN_PROBES` lists them.

A probe gets the op's spec, the layer's report of the judged call, the judged call's result, and a `Caller`
(backends/layer_probes.py: the op called again on the same inputs with some `CallSettings` changed); it returns what
it found (`Explained`: the line, what it says, and for a what-if the outputs the judge must find fixed) and whether
the worker must retire. Probes never change a verdict: the judged call's outputs and findings are the case's.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuemu_ci.backends import masked_other, nonfinite_probe
from gpuemu_ci.backends.layer_probes import Caller
from gpuemu_ci.calls import CallResult
from gpuemu_ci.config.model import OpSpec
from gpuemu_ci.triton_cpu.report import Explained, TritonReport

FAILED = "failed"  # an Explained that says a probe could not run (the layer's own error)

Probe = Callable[[OpSpec, TritonReport, CallResult, Caller], tuple[tuple[Explained, ...], bool]]

EXPLAIN_PROBES: tuple[Probe, ...] = (masked_other.probe, nonfinite_probe.probe)


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
