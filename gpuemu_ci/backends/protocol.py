"""Messages between the pool (parent) and a worker process.

Small metadata travels pickled over a local socket; array bytes never do: inputs live in a shared-memory
arena (see transport.py) and outputs follow a reply as raw byte frames. The parent only unpickles worker
replies with `loads_reply`, which accepts nothing but builtin containers and the dataclasses of this module,
so a misbehaving op cannot make the parent import or run anything.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from gpuemu_ci.backends.interface import CallTarget

# The arena starts with a small header the worker writes while it works, so that after a crash or a
# timeout the parent knows which call was running without any extra round trip.
HEADER_BYTES = 64
STAGE_OFFSET = 0  # int64: Stage
LOADED_AT_OFFSET = 8  # float64: time.monotonic() when loading finished (the case timer starts there)
RESCUE_OFFSET = 16  # int64 offset, int64 length: finished results saved in the arena before a risky call


class Stage(IntEnum):
    """What the worker is doing right now (written into the arena header)."""

    IDLE = 0
    LOADING = 1
    REFERENCE = 2
    OP = 3
    RERUN = 4
    REPLY = 5
    REFERENCE_ABS = 6  # the reference on |inputs| (the oracle's error scale)


@dataclass(frozen=True)
class ArenaRef:
    """A shared-memory segment the worker must attach (sent once per arena): a POSIX shared-memory name, or
    a file path when /dev/shm is too small for it (e.g. Docker's 64 MiB default)."""

    name: str
    size: int
    path: str | None = None


@dataclass(frozen=True)
class ArrayDesc:
    """One input inside the arena: the memory region copied from the caller's base buffer (gaps included)
    and the view over it. `strides` are byte strides, `data_offset` is relative to `region_offset`."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    region_offset: int
    region_nbytes: int
    data_offset: int


@dataclass(frozen=True)
class CaseRequest:
    """Run one case: reference, op, optional re-run. Targets are sent once per worker process (in
    `new_targets`) and referred to by number afterwards."""

    reference: int
    op: int
    inputs: tuple[ArrayDesc, ...]
    kwargs: dict[str, Any]
    out_arg: str | None
    out_dtype: str | None
    rerun: bool
    abs_inputs: tuple[str, ...] = ()  # also run the reference with these inputs replaced by |input|
    arena: ArenaRef | None = None  # set when the worker must switch to a new arena first
    new_targets: tuple[tuple[int, CallTarget], ...] = ()


@dataclass(frozen=True)
class Shutdown:
    """Ask the worker to exit cleanly."""


@dataclass(frozen=True)
class Hello:
    """First message of a worker: it is ready."""

    pid: int
    triton_interpret: bool


@dataclass(frozen=True)
class OutputDesc:
    """An output array (C order). Its bytes sit in the arena at `arena_offset`, or (-1) travel with the
    message: inline in CallDone.payload when there is one, else as one raw frame after the message."""

    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    arena_offset: int = -1


@dataclass(frozen=True)
class CallReply:
    """The outcome of one call. `status` is a CallStatus value."""

    status: str
    message: str = ""
    duration_s: float = 0.0
    outputs: tuple[OutputDesc, ...] = ()


@dataclass(frozen=True)
class CallDone:
    """The result of one call (stage REFERENCE, REFERENCE_ABS, OP or RERUN). Outputs are written into the
    arena behind the inputs when they fit; otherwise small ones travel inline in `payload` (concatenated
    C-order bytes) and large ones follow the message as raw frames. A worker saves every finished CallDone in
    the arena (or sends it, when it does not fit) before starting its next user call, so a later crash or
    timeout in the same case does not lose the results already computed."""

    stage: int
    reply: CallReply
    payload: bytes | None = None


@dataclass(frozen=True)
class CaseDone:
    """The last message of a case."""

    inputs_modified: tuple[str, ...] = ()
    interpreter: str | None = None
    retire: bool = False  # the worker's state is unusable (e.g. a sticky CUDA error): replace it
    calls: tuple[CallDone, ...] = ()  # results not sent yet: one message per case in the common case
    arena_wanted: int = 0  # arena bytes this case would have needed to keep every output in it
    interpreter_types: tuple[
        str, ...
    ] = ()  # bfloat16/fp8 handled by Triton's interpreter (backends.triton_probe)


_REPLY_TYPES = {cls.__name__: cls for cls in (Hello, OutputDesc, CallReply, CallDone, CaseDone)}


class _ReplyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == __name__ and name in _REPLY_TYPES:
            return _REPLY_TYPES[name]
        raise pickle.UnpicklingError(f"worker reply refers to {module}.{name}, which is not allowed")


def dumps(message: object) -> bytes:
    """Encode a message (either direction)."""
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def loads_request(data: bytes) -> object:
    """Decode a parent request (trusted: the parent wrote it)."""
    return pickle.loads(data)


def loads_reply(data: bytes) -> object:
    """Decode a worker reply, allowing only this module's reply types and builtin values."""
    return _ReplyUnpickler(io.BytesIO(data)).load()
