"""A case's inputs built once, in the pool, and shipped to both of its workers (issue #48).

Each side used to build the case's inputs from its seed, so every case paid for them twice. Where building
them runs no user code (no inputs hook; a case from its seed, not a snapshot) and they are not large, the pool
builds them once (`fuzz/inputs.case_inputs`, the same function the workers call) and sends each worker its
own pickled copy with the case's request. Each worker then holds private, writable bytes: the op may write
into its inputs (and is caught doing so, op_side.py) without reaching the judge's copy, which is another
process's memory; and the judge still checks the op side's digest against its own. What the pool cannot
build here (a hook, a snapshot, a large case, an error) it leaves to the workers, which build and report it
exactly as before.

Arrays travel as the memory behind them (transport.memory_region: the whole allocation a strided view was cut
from, its poisoned gaps included) plus dtype, shape, strides and offset, so each view is rebuilt over the
same bytes in the same layout; arrays cut from one allocation share one rebuilt buffer, and a read-only
array stays read-only.
"""

from __future__ import annotations

import ctypes
import io
import math
import pickle
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from gpuemu_ci.backends.interface import CaseSpec, OpTask
from gpuemu_ci.backends.transport import memory_region
from gpuemu_ci.config.model import OpSpec
from gpuemu_ci.fuzz.case import CaseInputs, case_dims
from gpuemu_ci.fuzz.inputs import case_inputs
from gpuemu_ci.fuzz.shapes import shape_of
from gpuemu_ci.plan.expand import stratum
from gpuemu_ci.plan.model import SizeClass

# Elements of a case's inputs the pool builds: a small case's cost is the generator's fixed cost per array,
# which shipping saves; a large one's is its bytes, which the pool would build on one core (each worker builds
# its own copy in parallel) and then copy three times (pickle, socket, unpickle). 2^17 elements is the
# quickstart's largest case; the Liger field suite's are larger, and ran slower shipped (docs/benchmarks.md).
SHIP_ELEMENTS = 1 << 17
SHIP_LIMIT = 8 * SHIP_ELEMENTS  # bytes of memory behind the arrays (gaps and padding included)


def ship(task: OpTask, spec: CaseSpec) -> tuple[CaseSpec, float]:
    """`spec` with its inputs built here and packed (`CaseSpec.inputs`), and the seconds that took; `spec`
    unchanged when the workers must build them (a hook, a snapshot, a large case, anything that raises)."""
    op = task.op
    if op.targets.inputs_hook or spec.snapshot is not None or spec.inputs is not None:
        return spec, 0.0
    started = time.perf_counter()
    try:
        if stratum(op, spec.seed).size_class is SizeClass.LARGE or _elements(op, spec) > SHIP_ELEMENTS:
            return spec, time.perf_counter() - started
        case = case_inputs(op, spec.seed, task.root, _no_hooks, dims=spec.dims, scale=spec.scale)
        packed = pack(case, SHIP_LIMIT)
    except Exception:  # the workers build it, and report what goes wrong as they always did
        return spec, time.perf_counter() - started
    seconds = time.perf_counter() - started
    return (replace(spec, inputs=packed) if packed is not None else spec), seconds


def _elements(op: OpSpec, spec: CaseSpec) -> int:
    """How many elements the case's inputs hold, from its dims alone (before any is built)."""
    dims = spec.dims if spec.dims is not None else case_dims(op, spec.seed)
    return sum(math.prod(shape_of(item.dims, dims)) for item in op.shapes.inputs)


def _no_hooks(reference: str, root: Path) -> Any:
    raise RuntimeError(f"the pool builds no inputs that need a hook ({reference})")


def pack(case: CaseInputs, limit: int = SHIP_LIMIT) -> bytes | None:
    """The case as bytes `unpack` rebuilds exactly; None when its arrays' memory exceeds `limit` bytes."""
    out = io.BytesIO()
    pickler = _Packer(out, limit)
    pickler.dump(case)
    return None if pickler.total > limit else out.getvalue()


def unpack(packed: bytes) -> CaseInputs:
    """The case `pack` packed: private, writable copies of its arrays' memory (read-only views stay so)."""
    case = pickle.loads(packed)
    if not isinstance(case, CaseInputs):
        raise TypeError(f"shipped inputs hold a {type(case).__name__}, not a case")
    return case


class _Packer(pickle.Pickler):
    """Pickles arrays as views over their whole allocation, one copy of each allocation."""

    def __init__(self, out: io.BytesIO, limit: int) -> None:
        super().__init__(out, protocol=pickle.HIGHEST_PROTOCOL)
        self.limit = limit
        self.total = 0
        self.buffers: dict[tuple[int, int], bytearray] = {}

    def reducer_override(self, obj: object) -> Any:
        if type(obj) is not np.ndarray:
            return NotImplemented
        address, nbytes, offset = memory_region(obj)
        buffer = self.buffers.get((address, nbytes))
        if buffer is None:
            self.total += nbytes
            # Past the limit nothing is shipped: stop copying, only finish the pickle.
            buffer = bytearray(_read(address, nbytes) if self.total <= self.limit else b"")
            self.buffers[(address, nbytes)] = buffer
        if self.total > self.limit:
            return _rebuilt_empty, (obj.dtype,)
        return _rebuilt, (buffer, obj.dtype, obj.shape, obj.strides, offset, bool(obj.flags.writeable))


def _read(address: int, nbytes: int) -> bytes:
    return bytes((ctypes.c_char * nbytes).from_address(address)) if nbytes else b""


def _rebuilt(
    buffer: bytearray,
    dtype: np.dtype,
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    offset: int,
    writeable: bool,
) -> np.ndarray:
    if not buffer:  # an empty view: nothing behind it
        array = np.empty(shape, dtype=dtype)
    else:
        # Over an array of the whole allocation, as generated: memory_region finds all of it (the gaps).
        whole = np.frombuffer(buffer, dtype=np.uint8)
        array = np.ndarray(shape, dtype=dtype, buffer=whole, offset=offset, strides=strides)
    array.flags.writeable = writeable
    return array


def _rebuilt_empty(dtype: np.dtype) -> np.ndarray:
    return np.empty(0, dtype=dtype)  # never unpacked: pack() returns None past its limit
