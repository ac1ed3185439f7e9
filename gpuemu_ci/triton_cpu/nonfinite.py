"""Where a kernel first made a non-finite value from finite operands: in an explain probe's call
(`CallSettings.first_nonfinite`, backends/nonfinite_probe.py) the interpreter's float operations are watched, and
the first one whose result holds a NaN or an infinity at a lane where every float operand was finite is noted
with its line and program (a division by zero, a log of 0, an exp that overflows). Installed only for that
call (layer.py): no other call pays for it.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from gpuemu_ci.triton_cpu import active, sites
from gpuemu_ci.triton_cpu.report import NONFINITE, Explained

# The interpreter's builder methods that compute floats from floats.
FLOAT_OPS = (
    "create_fadd",
    "create_fsub",
    "create_fmul",
    "create_fdiv",
    "create_frem",
    "create_precise_divf",
    "create_approx_divf",
    "create_fma",
    "create_exp",
    "create_exp2",
    "create_log",
    "create_log2",
    "create_sqrt",
    "create_precise_sqrt",
    "create_rsqrt",
    "create_sin",
    "create_cos",
    "create_erf",
    "create_fp_trunc",
    "create_fp_to_fp",
)


def watched(original: Any, name: str) -> Any:
    """A float builder method (`name`: the builder's, `create_fdiv`) that notes the call's first non-finite
    result made from finite operands."""
    what = name.removeprefix("create_")

    def op(self: Any, *args: Any, **kwargs: Any) -> Any:
        made = original(self, *args, **kwargs)
        call = active.call()
        if call is None or call.launch is None or any(e.by == NONFINITE for e in call.explained):
            return made
        finite = _finite(getattr(made, "data", None))
        if finite is None:
            return made
        fresh = ~finite
        for operand in args:
            value = _finite(getattr(operand, "data", None))
            if fresh.any() and value is not None:
                with contextlib.suppress(ValueError):  # not elementwise with the result: nothing per lane
                    fresh &= np.broadcast_to(value, fresh.shape)
        if fresh.any():
            launch = call.launch
            site = sites.site(launch)
            text = (
                f"the first non-finite value the kernels made from finite operands: `{what}` at {site}, "
                f"program {launch.program} of `{launch.kernel}`"
            )
            call.explained.append(Explained(NONFINITE, site, text))
        return made

    return op


def _finite(data: object) -> np.ndarray | None:
    """Per element, whether a float value is finite (bfloat16 and fp8 included); None for anything else."""
    if not isinstance(data, np.ndarray):
        return None
    if data.dtype.kind == "f":
        return np.isfinite(data)
    if data.dtype.name.startswith(("bfloat16", "float8")):
        return np.isfinite(data.astype(np.float32))
    return None
