"""The masked-load `other` what-if of an explain re-run (backends/masked_other.py): which loads with `other=`
had masked-off lanes, and the same call with one such load's masked lanes reading another value.

In the explain re-run's judged call (`CallSettings.log_stores`) every float load with `other` and some lane
masked off is noted with its line and its `other` (when one value fills it); a what-if call
(`CallSettings.other_override`: a line and a value) has that line's masked lanes read the value instead. Nothing
here runs in a case that is not being explained.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from gpuemu_ci.triton_cpu import sites
from gpuemu_ci.triton_cpu.boundary import Handle
from gpuemu_ci.triton_cpu.call import CallRecord, Launch

MODULE = "triton.runtime.interpreter"
MAX_NOTED = 8  # loads with `other` noted per call


def masked_other(call: CallRecord, launch: Launch, other: Handle) -> Any:
    """A load's `other` (some lane of it masked off): noted in the explained call, replaced in a what-if."""
    settings = call.settings
    if not settings.log_stores and settings.other_override is None:
        return other
    data = np.asarray(other.data)
    if data.dtype.kind != "f" or data.size == 0:
        return other
    site = sites.site(launch)
    if settings.log_stores and site not in call.masked_others and len(call.masked_others) < MAX_NOTED:
        first = data.reshape(-1)[0]
        uniform = bool(np.all(data == first)) or bool(np.all(np.isnan(data)))
        if uniform:
            call.masked_others[site] = float(first)
    override = settings.other_override
    if override is None or override[0] != site:
        return other
    return sys.modules[MODULE].TensorHandle(np.full(data.shape, override[1], dtype=data.dtype), other.dtype)
