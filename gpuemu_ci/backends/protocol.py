"""Messages between the pool (parent) and a worker process.

Requests (parent -> worker) are pickled: the parent wrote them. Replies (worker -> parent) come from a process
that runs user code, so they are decoded by msgspec into exactly the types below and checked again by the
pool (sizes, offsets, dtypes): anything that does not parse into what was asked is that case's `crashed`
failure, never an exception in the parent. Arrays never travel in messages: the op's outputs go into a
shared-memory arena (an anonymous memfd handed over as a file descriptor), which the judge process maps.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from enum import IntEnum
from typing import Annotated

import msgspec

from gpuemu_ci.backends.interface import CaseSpec, OpTask
from gpuemu_ci.calls import CaseReport, LaunchedKernel
from gpuemu_ci.triton_cpu.report import TritonReport


class Stage(IntEnum):
    """What the worker is doing right now (written into its status page; used for messages only, never for
    deadlines, which the parent keeps on its own clock)."""

    IDLE = 0
    LOADING = 1
    REFERENCE = 2
    OP = 3
    RERUN = 4
    REPLY = 5
    REFERENCE_ABS = 6
    GENERATING = 7
    NAIVE = 8
    JUDGING = 9
    PROBE = 10  # a second call of the op with one setting of the Triton layer changed (layer_probes.py)


STAGE_WORDS = {
    Stage.IDLE: "before the case started",
    Stage.LOADING: "while importing the op and reference",
    Stage.REFERENCE: "in the reference call",
    Stage.REFERENCE_ABS: "in the reference call on |inputs|",
    Stage.OP: "in the op call",
    Stage.RERUN: "in the determinism re-run of the op",
    Stage.PROBE: "in a second call of the op that probed the Triton layer's settings (masked lanes, program "
    "order or TF32)",
    Stage.REPLY: "while sending results",
    Stage.GENERATING: "while generating the case's inputs",
    Stage.NAIVE: "in the naive implementation's call",
    Stage.JUDGING: "while judging the outputs",
}


# ---- parent -> worker -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArenaGrant:
    """A shared-memory arena for this task: its file descriptor rides along with the message."""

    size: int


@dataclass(frozen=True)
class RunOp:
    """Generate the case's inputs, call the op (and re-run it), write the outputs into the arena."""

    task: int  # this side's number: every reply carries it, so a late or stray reply is never misread
    key: str
    case: CaseSpec
    arena: ArenaGrant
    tasks: tuple[OpTask, ...] = ()  # op descriptions this worker has not seen yet


@dataclass(frozen=True)
class PlaceOutputs:
    """The outputs did not fit: here is a larger arena for them."""

    task: int
    arena: ArenaGrant


@dataclass(frozen=True)
class OpSideResult:
    """What the op side produced, as the judge receives it (outputs: descriptors into the arena)."""

    op: CallReply
    rerun: CallReply | None
    inputs_modified: tuple[str, ...]
    interpreter: str | None
    op_stderr: str = ""  # the op worker's output during the case, when a call failed
    interpreter_types: tuple[str, ...] = ()  # bfloat16/fp8 handled by Triton's interpreter (triton_probe)
    inputs_digest: str = ""  # of the inputs the op's side built (Built), "" when it built none
    skipped: str = ""  # the op's side could not hold the case on this machine (CaseSkipped): why
    triton: TritonReport | None = None  # what the GPU-faithful layer saw (gpuemu_ci/triton_cpu)
    not_run: str = ""  # who failed before the op could be called ("inputs hook", "setup"); "" when it was
    kernels: tuple[LaunchedKernel, ...] = ()  # the Triton functions the op's calls ran (triton_probe)


@dataclass(frozen=True)
class Judge:
    """Generate the same inputs, call the reference, judge the op's outputs (read from the arena)."""

    task: int
    key: str
    case: CaseSpec
    op_side: OpSideResult
    arena: ArenaGrant | None  # None when the op produced no outputs
    tasks: tuple[OpTask, ...] = ()


@dataclass(frozen=True)
class Shutdown:
    """Ask the worker to exit cleanly."""


def dumps_request(message: object) -> bytes:
    """A request from the pool to a worker, as the bytes of one frame (pickle: the pool is the trusted
    side)."""
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def loads_request(data: bytes) -> object:
    """Decode a parent request (trusted: the parent wrote it)."""
    return pickle.loads(data)


# ---- worker -> parent -------------------------------------------------------------------------------------


class OutputDesc(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An output array (C order) at `offset` in the arena."""

    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    offset: int


class CallReply(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The outcome of one call. `status` is a CallStatus value."""

    status: str
    message: str = ""
    duration_s: float = 0.0
    outputs: tuple[OutputDesc, ...] = ()


class Hello(msgspec.Struct, frozen=True, tag=True, forbid_unknown_fields=True):
    """First message of a worker: it is ready."""

    pid: int


class Ready(msgspec.Struct, frozen=True, tag=True, forbid_unknown_fields=True):
    """The worker imported what the side needs: the case's timer starts now (on the parent's clock)."""

    task: int


class Built(msgspec.Struct, frozen=True, tag=True, forbid_unknown_fields=True):
    """The op side built the case's inputs: their digest (fuzz/inputs.py), sent before the op runs so that a
    crash keeps it. The judge compares it with the digest of the inputs it builds."""

    task: int
    inputs_digest: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{32}$")]


class OpPartial(msgspec.Struct, frozen=True, tag=True, forbid_unknown_fields=True):
    """The op's first call, sent before the determinism re-run (which might kill the process)."""

    task: int
    op: CallReply


class OpDone(msgspec.Struct, frozen=True, tag=True, forbid_unknown_fields=True):
    """The op side of a case. `needs` > 0: the outputs did not fit the arena and wait for PlaceOutputs."""

    task: int
    op: CallReply
    rerun: CallReply | None = None
    inputs_modified: tuple[str, ...] = ()
    interpreter: str | None = None
    retire: bool = False  # the worker's state is unusable (a sticky CUDA error): replace it
    needs: int = 0
    interpreter_types: tuple[str, ...] = ()  # bfloat16/fp8 handled by Triton's interpreter (triton_probe)
    skipped: str = ""  # this machine cannot hold the case (CaseSkipped): why
    triton: TritonReport | None = None  # what the GPU-faithful layer saw (gpuemu_ci/triton_cpu)
    not_run: str = ""  # who failed before the op could be called ("inputs hook", "setup"); "" when it was
    kernels: tuple[LaunchedKernel, ...] = ()  # the Triton functions the op's calls ran (triton_probe)
    phases: dict[str, float] = {}  # seconds per phase of this side (backends/phases.py): clock readings only


class Verdict(msgspec.Struct, frozen=True, tag=True, forbid_unknown_fields=True):
    """The judge side of a case."""

    task: int
    report: CaseReport
    retire: bool = False
    phases: dict[str, float] = {}  # seconds per phase of this side (backends/phases.py): clock readings only


Reply = Hello | Ready | Built | OpPartial | OpDone | Verdict


def _encode_extra(value: object) -> object:
    from gpuemu_ci.results.codec import encode_extra  # NumPy scalars in kwargs

    return encode_extra(value)


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_encode_extra)
_DECODER = msgspec.msgpack.Decoder(Reply)


def dumps_reply(message: Reply) -> bytes:
    """A worker's reply as the bytes of one frame (msgspec, so the pool decodes it as data, never as code)."""
    return _ENCODER.encode(message)


def loads_reply(data: bytes) -> Reply:
    """Decode a worker reply into one of the reply types; msgspec.DecodeError (ValidationError included)
    for anything else."""
    reply: Reply = _DECODER.decode(data)  # msgspec types a decoder of a union as Any
    return reply
