"""The first non-finite value (an explain probe, backends/explain_probes.py): when the judged call returned NaN or
infinite values, the op is called again one program at a time with the interpreter's float operations watched
(triton_cpu/nonfinite.py), and the first operation that made a NaN or an infinity from finite operands is named
with its line and program: "the first non-finite value the kernels made from finite operands: `div` at
rms.py:63 (in _rms_norm), program (0, 0, 0)". It explains a `nonfinite` or `mismatch` failure alone, and only
when the watched call computed exactly the judged call's outputs."""

from __future__ import annotations

import msgspec
import numpy as np

from gpuemu_ci.backends.masked_other import output_bytes
from gpuemu_ci.backends.probe_caller import ProbeCaller
from gpuemu_ci.backends.transport import is_float_like
from gpuemu_ci.calls import CallResult
from gpuemu_ci.config.model import OpSpec
from gpuemu_ci.results.model import FailureKind
from gpuemu_ci.triton_cpu.report import NONFINITE, Explained, TritonReport


def probe(
    op: OpSpec, seen: TritonReport, judged: CallResult, call: ProbeCaller
) -> tuple[tuple[Explained, ...], bool]:
    """The first non-finite value's line, where the judged call returned any."""
    if not any(_nonfinite(y) for y in judged.outputs):
        return (), False
    result, retire = call(first_nonfinite=True, vectorise=False, replay=False)
    report = call.report()
    if retire or report is None or output_bytes(result, judged) != output_bytes(judged, judged):
        return (), retire
    kind = (
        FailureKind.NONFINITE.value,
        FailureKind.MISMATCH.value,
    )  # an exact comparison calls a NaN a mismatch
    found = (msgspec.structs.replace(e, kinds=kind) for e in report.explained if e.by == NONFINITE)
    return tuple(found), False


def _nonfinite(y: object) -> bool:
    a = np.asarray(y)
    return is_float_like(a.dtype) and not bool(np.isfinite(a.astype(np.float64)).all())
