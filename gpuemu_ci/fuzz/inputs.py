"""The one way a case's inputs are made, from its seed or from the snapshot that pins it, and the digest that
proves two processes made the same ones.

Every process that needs a case's inputs calls `case_inputs`: the op's worker and the judge's (casework.py),
and through them replay, minimize, shadow captures and corpus cases. The op's side sends `inputs_digest` of
what it built with its outputs and the judge compares it with its own, so a case whose inputs depend on
anything but its seed (hash order, process state, time, the machine, a hook that draws its own randomness)
is caught as the tool's error instead of becoming a verdict about inputs the op never saw.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from gpuemu_ci.config.model import OpSpec
from gpuemu_ci.fuzz import layouts as layout_mod
from gpuemu_ci.fuzz.case import CaseInputs, HookLoader, build_case
from gpuemu_ci.fuzz.snapshot import case_from_snapshot

DIGEST_CHARS = 32  # hex characters of SHA-256 shown and compared: 128 bits


def case_inputs(
    op: OpSpec,
    seed: int,
    root: Path,
    load: HookLoader,
    *,
    dims: Mapping[str, int] | None = None,
    scale: float | None = None,
    snapshot: Path | None = None,
) -> CaseInputs:
    """The case's inputs: byte for byte what its seed gives on any machine and in any process (with the
    minimizer's `dims` and `scale` overrides), or exactly what `snapshot` holds. `load` imports the op's
    inputs hook (`pkg.mod:function`, relative to `root`). Raises CaseSkipped for a case this machine's memory
    cannot hold, InputsHookError when the hook fails, UsageError for a snapshot that does not fit the op."""
    if snapshot is not None:
        return case_from_snapshot(op, snapshot)
    return build_case(op, seed, root, dims_override=dims, value_scale=scale, load=load)


def inputs_digest(case: CaseInputs) -> str:
    """SHA-256 of what the op receives: dims and kwargs, then per input its name, dtype, shape, element
    strides and values (in C order; the poisoned gaps of a strided layout are the layout's, pinned by the
    strides)."""
    h = hashlib.sha256()
    head = {"dims": {k: int(v) for k, v in case.dims.items()}, "kwargs": dict(case.kwargs)}
    h.update(json.dumps(head, sort_keys=True, default=repr).encode())
    for name, array in case.arrays.items():
        described = (name, array.dtype.name, tuple(array.shape), layout_mod.element_strides(array))
        h.update(repr(described).encode())
        h.update(np.ascontiguousarray(array).view(np.uint8).data)  # raw bytes, bfloat16 included
    return h.hexdigest()[:DIGEST_CHARS]
