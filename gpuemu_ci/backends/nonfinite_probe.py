"""The first non-finite value (an explain probe, backends/explain_probes.py): when the judged call of an explain
re-run returned NaN or infinite values, the first operation that made a NaN or an infinity from finite operands is
named with its line and program: "the first non-finite value the kernels made from finite operands: `fdiv` at
rms.py:63 (in _rms_norm), program (0, 0, 0)". The re-run's float64 shadow call notes it (explain_shadow.py,
triton_cpu/shadow.py `ShadowRun.made`, in the programs it follows) and hands it to the judged call's report: no
call of its own. It explains a `nonfinite` or `mismatch` failure
alone (an exact comparison calls a NaN a mismatch), and only when the judged call's outputs hold a non-finite
value: one the kernel made and then masked away explains nothing."""

from __future__ import annotations

import msgspec
import numpy as np

from gpuemu_ci.backends.layer_probes import Caller
from gpuemu_ci.backends.transport import is_float_like
from gpuemu_ci.calls import CallResult
from gpuemu_ci.config.model import OpSpec
from gpuemu_ci.results.model import FailureKind
from gpuemu_ci.triton_cpu.report import Explained, TritonReport

KINDS = (FailureKind.NONFINITE.value, FailureKind.MISMATCH.value)


def probe(
    op: OpSpec, seen: TritonReport, judged: CallResult, call: Caller
) -> tuple[tuple[Explained, ...], bool]:
    """The first non-finite value's line, where the judged call returned any."""
    found = seen.first_nonfinite
    if found is None or not holds_nonfinite(judged):
        return (), False
    return (msgspec.structs.replace(found, kinds=KINDS),), False


def holds_nonfinite(result: CallResult) -> bool:
    """Whether the call returned a NaN or an infinity."""
    return any(_nonfinite(y) for y in result.outputs)


def _nonfinite(y: object) -> bool:
    a = np.asarray(y)
    return is_float_like(a.dtype) and not bool(np.isfinite(a.astype(np.float64)).all())
