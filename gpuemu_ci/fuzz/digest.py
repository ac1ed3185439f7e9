"""The digest of a case's inputs: what the op's worker and the judge's compare to prove they built the same
case, and what failure records and snapshots keep so a replay can tell it rebuilt the recorded inputs."""

from __future__ import annotations

import hashlib
import json

import numpy as np

from gpuemu_ci.fuzz import layouts as layout_mod
from gpuemu_ci.fuzz.case import CaseInputs

DIGEST_CHARS = 32  # hex characters of SHA-256 shown and compared: 128 bits


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
