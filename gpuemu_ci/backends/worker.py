"""The worker process: imports user code once, then runs cases sent by the pool until told to stop.

Started by pool.py as `python -m gpuemu_ci.backends.worker FD` (a fresh interpreter: nothing inherited from
the parent's state). FD is one end of a socketpair carrying protocol messages; the process's stdout is
pointed at its stderr log so user prints cannot corrupt the protocol, and faulthandler writes a Python
traceback there if user code segfaults or aborts.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from gpuemu_ci.backends import triton_probe
from gpuemu_ci.backends.cuda import OUTPUT_DTYPE_KWARG
from gpuemu_ci.backends.frameworks import BadOutput, Bridge, get_bridge, to_numpy_outputs
from gpuemu_ci.backends.interface import CallStatus, CallTarget, TargetKind
from gpuemu_ci.backends.loading import Loaded, LoadError, describe_exception, load_target
from gpuemu_ci.backends.protocol import (
    HEADER_BYTES,
    CallDone,
    CallReply,
    CaseDone,
    CaseRequest,
    Hello,
    Shutdown,
    Stage,
    dumps,
    loads_request,
)
from gpuemu_ci.backends.transport import (
    INLINE_LIMIT,
    attach,
    describe,
    is_float_like,
    pack_inline,
    place_outputs,
    resolve_dtype,
    send_arrays,
    span,
    view_input,
    write_loaded_at,
    write_rescue,
    write_stage,
)

# Errors after which a CUDA context cannot be trusted: the worker answers, then is replaced.
_STICKY_CUDA = (
    "illegal memory access",
    "illegal address",
    "cudaErrorIllegalAddress",
    "CUDA_ERROR_ILLEGAL_ADDRESS",
    "unspecified launch failure",
    "CUDA_ERROR_LAUNCH_FAILED",
    "device-side assert",
    "misaligned address",
)


def _classify(exc: BaseException) -> tuple[CallStatus, bool]:
    """(status, retire the worker) for an exception raised by user code."""
    if isinstance(exc, BadOutput):
        return CallStatus.BAD_OUTPUT, False
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":  # torch, cupy
        return CallStatus.OOM, False
    text = f"{type(exc).__name__} {exc}"
    if any(marker in text for marker in _STICKY_CUDA):
        return CallStatus.CRASHED, True
    return CallStatus.RAISED, False


def _materialize(arr: np.ndarray, arena: np.ndarray | None) -> np.ndarray:
    """An independent C-order copy when the output may alias the shared inputs (restored before a re-run)."""
    if arena is not None and np.may_share_memory(arr, arena):
        return np.array(arr, order="C", copy=True)
    return np.ascontiguousarray(arr)


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    if a.size % 8 == 0:  # regions are 64-byte aligned: compare in 8-byte words
        return bool(np.array_equal(a.view(np.uint64), b.view(np.uint64)))
    return bool(np.array_equal(a, b))


def _reference_copy(view: np.ndarray) -> np.ndarray:
    """Contiguous float64 copy of a float input (exact upcast), unchanged contiguous copy otherwise."""
    if is_float_like(view.dtype):
        return np.array(view, dtype=np.float64, order="C")
    if view.dtype.kind == "c":
        return np.array(view, dtype=np.complex128, order="C")
    return np.array(view, order="C", copy=True)


def _as_reference_output(arr: np.ndarray) -> np.ndarray:
    if is_float_like(arr.dtype) and arr.dtype != np.float64:
        return arr.astype(np.float64)
    return arr


class Worker:
    """State kept across cases: the arena mapping (loaded targets are cached in loading.py)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.mm: Any = None
        self.u8: np.ndarray | None = None
        self.targets: dict[int, CallTarget] = {}
        self.pending: list[CallDone] = []  # small results, sent with CaseDone
        self.inputs_end = HEADER_BYTES  # where the arena's free space starts
        self.cursor = HEADER_BYTES  # next free arena byte for outputs
        self.wanted = HEADER_BYTES  # where the cursor would be if every output had fit

    def _stage(self, stage: Stage) -> None:
        if self.u8 is not None:
            write_stage(self.u8, stage)

    def _load(self, target: CallTarget) -> tuple[Loaded | None, CallReply | None]:
        try:
            return load_target(target), None
        except LoadError as exc:
            return None, CallReply(CallStatus.IMPORT_ERROR.value, str(exc))

    def _call(
        self,
        loaded: Loaded,
        bridge: Bridge,
        inputs: dict[str, Any],
        kwargs: dict[str, Any],
        out: Any,
        expected: np.dtype | None = None,
    ) -> tuple[CallReply, list[np.ndarray], bool]:
        """Run one call; returns (reply, outputs, retire). `expected`: the op's output dtype, for frameworks
        that hand it back under another name (CuPy's bfloat16 bits)."""
        start = time.perf_counter()
        try:
            result = loaded.invoke(inputs, kwargs)
            bridge.synchronize()
            duration = time.perf_counter() - start
            if result is None and out is not None:
                result = out
            outputs = bridge.outputs_as(
                [_materialize(a, self.u8) for a in to_numpy_outputs(result)], expected
            )
        except BaseException as exc:  # user code may raise anything, SystemExit included
            duration = time.perf_counter() - start
            status, retire = _classify(exc)
            message = f"{exc}" if status is CallStatus.BAD_OUTPUT else describe_exception(exc)
            return CallReply(status.value, message, duration), [], retire
        ok = CallReply(CallStatus.OK.value, "", duration, tuple(describe(a) for a in outputs))
        return ok, outputs, False

    def _reference(
        self,
        req: CaseRequest,
        target: CallTarget,
        loaded: Loaded,
        views: dict[str, np.ndarray],
        absolute: tuple[str, ...],
    ) -> tuple[CallReply, list[np.ndarray], bool]:
        """The reference on fp64 copies (inputs named in `absolute` replaced by their absolute values)."""
        bridge = get_bridge(target.framework)
        try:
            copies = {n: _reference_copy(v) for n, v in views.items()}
            for name in absolute:
                if name in copies:
                    np.abs(copies[name], out=copies[name])
            ref_in = {n: bridge.to_native(c).value for n, c in copies.items()}
        except Exception as exc:
            return CallReply(CallStatus.RAISED.value, f"handing inputs to the reference: {exc}"), [], False
        reply, outputs, retire = self._call(loaded, bridge, ref_in, dict(req.kwargs), None)
        outputs = [_as_reference_output(a) for a in outputs]
        return replace(reply, outputs=tuple(describe(a) for a in outputs)), outputs, retire

    def handle(self, req: CaseRequest) -> None:
        """Run one case, sending CallDone after each call and CaseDone at the end."""
        self.targets.update(req.new_targets)
        reference, op = self.targets[req.reference], self.targets[req.op]
        if req.arena is not None:
            self.u8 = None
            self.mm = attach(req.arena)
            self.u8 = np.frombuffer(self.mm, dtype=np.uint8)
        self._stage(Stage.LOADING)
        views = {d.name: view_input(self.mm, d) for d in req.inputs}
        regions = {d.name: (d.region_offset, d.region_nbytes, d.data_offset) for d in req.inputs}
        self.inputs_end = max((o + n for o, n, _ in regions.values()), default=HEADER_BYTES)
        self.cursor = self.wanted = self.inputs_end  # outputs and saved results go behind the inputs
        ref_loaded, ref_failure = self._load(reference)
        op_loaded, op_failure = self._load(op)
        if self.u8 is not None:
            write_loaded_at(self.u8, time.monotonic())
        unusable = CallReply(CallStatus.CRASHED.value, "not run: the GPU context is unusable")
        retire = False

        self._stage(Stage.REFERENCE)
        ref_out: list[np.ndarray] = []
        if ref_loaded is None:
            assert ref_failure is not None
            self._send(Stage.REFERENCE, ref_failure, [])
        else:
            reply, ref_out, retire = self._reference(req, reference, ref_loaded, views, ())
            self._send(Stage.REFERENCE, reply, ref_out)
        if req.abs_inputs:
            self._stage(Stage.REFERENCE_ABS)
            if ref_loaded is None:
                assert ref_failure is not None
                self._send(Stage.REFERENCE_ABS, ref_failure, [])
            elif retire:
                self._send(Stage.REFERENCE_ABS, unusable, [])
            else:
                self._flush()
                reply, abs_out, retire = self._reference(req, reference, ref_loaded, views, req.abs_inputs)
                self._send(Stage.REFERENCE_ABS, reply, abs_out)

        modified: tuple[str, ...] = ()
        interpreter: str | None = None
        interpreter_types: tuple[str, ...] = ()
        if op_loaded is None or retire:
            self._send(Stage.OP, op_failure or unusable, [])
        else:
            self._stage(Stage.OP)
            used = self.inputs_end
            snapshot = self.u8[HEADER_BYTES:used].copy() if self.u8 is not None else None
            launches_before = triton_probe.mark()
            self._flush()
            reply, op_out, retire = self._run_op(req, op, op_loaded, views, regions, ref_out, Stage.OP)
            if snapshot is not None and self.u8 is not None:
                modified = tuple(
                    name
                    for name, (o, n, _) in regions.items()
                    if n
                    and not _same_bytes(self.u8[o : o + n], snapshot[o - HEADER_BYTES : o + n - HEADER_BYTES])
                )
            self._send(Stage.OP, reply, op_out)
            if req.rerun and not retire:
                if snapshot is not None and self.u8 is not None:
                    self.u8[HEADER_BYTES:used] = snapshot  # identical fresh inputs
                self._flush()
                reply, rerun_out, retire = self._run_op(
                    req, op, op_loaded, views, regions, ref_out, Stage.RERUN
                )
                self._send(Stage.RERUN, reply, rerun_out)
            elif req.rerun:
                self._send(Stage.RERUN, unusable, [])
            interpreter, interpreter_types = triton_probe.since(launches_before)
        self._stage(Stage.REPLY)
        done = CaseDone(modified, interpreter, retire, tuple(self.pending), self.wanted, interpreter_types)
        self.conn.send_bytes(dumps(done))
        self.pending.clear()
        self._stage(Stage.IDLE)

    def _send(self, stage: Stage, reply: CallReply, outputs: list[np.ndarray]) -> None:
        """Queue a result whose outputs fit in the arena or inline (sent with CaseDone), or send a large one
        now with raw frames."""
        self.wanted += span(outputs)
        placed = place_outputs(self.u8, self.cursor, outputs) if self.u8 is not None else None
        if placed is not None:
            descs, self.cursor = placed
            self.pending.append(CallDone(int(stage), replace(reply, outputs=tuple(descs))))
            return
        if sum(a.nbytes for a in outputs) <= INLINE_LIMIT:
            self.pending.append(CallDone(int(stage), reply, pack_inline(outputs)))
            return
        self._flush()
        self.conn.send_bytes(dumps(CallDone(int(stage), reply)))
        send_arrays(self.conn, outputs)

    def _flush(self) -> None:
        """Make queued results survive the next user call, which might kill the process: save them in the
        arena behind the inputs (they still go out with CaseDone), or send them now if they do not fit."""
        if not self.pending:
            return
        end = write_rescue(self.u8, self.cursor, dumps(tuple(self.pending))) if self.u8 is not None else None
        if end is not None:
            self.cursor = end  # later outputs must not overwrite the saved results
            return
        for done in self.pending:
            self.conn.send_bytes(dumps(done))
        self.pending.clear()

    def _run_op(
        self,
        req: CaseRequest,
        target: CallTarget,
        loaded: Loaded,
        views: dict[str, np.ndarray],
        regions: dict[str, tuple[int, int, int]],
        ref_out: list[np.ndarray],
        stage: Stage,
    ) -> tuple[CallReply, list[np.ndarray], bool]:
        """One op call on the shared inputs (converted for its framework), with a fresh `out=` buffer."""
        bridge = get_bridge(target.framework)
        call_kwargs = dict(req.kwargs)
        if target.kind is TargetKind.CUDA_KERNEL and req.out_dtype:
            # A launch allocates the buffer the kernel writes: it takes the case's output dtype.
            call_kwargs[OUTPUT_DTYPE_KWARG] = req.out_dtype
        out = None
        try:
            natives = {}
            for name, view in views.items():
                o, n, d = regions[name]
                region = self.u8[o : o + n] if (self.u8 is not None and n) else None
                natives[name] = bridge.to_native(view, region, d)
            if req.out_arg:
                if not ref_out:
                    return (
                        CallReply(
                            CallStatus.RAISED.value,
                            f"not run: the `{req.out_arg}=` buffer takes the reference output's shape, "
                            "and the reference returned none",
                        ),
                        [],
                        False,
                    )
                out = bridge.full_nan(ref_out[0].shape, self._out_dtype(req, views, ref_out[0]))
                call_kwargs[req.out_arg] = out
        except Exception as exc:
            failed = CallReply(CallStatus.RAISED.value, f"handing inputs to {target.framework.value}: {exc}")
            return failed, [], False
        self._stage(stage)
        values = {n: v.value for n, v in natives.items()}
        expected = resolve_dtype(req.out_dtype) if req.out_dtype else None
        reply, outputs, retire = self._call(loaded, bridge, values, call_kwargs, out, expected)
        for native in natives.values():
            if native.write_back is not None and not retire:
                native.write_back()  # device-side writes into inputs become visible to the comparison
        return reply, outputs, retire

    @staticmethod
    def _out_dtype(req: CaseRequest, views: dict[str, np.ndarray], ref: np.ndarray) -> np.dtype:
        if req.out_dtype:
            return resolve_dtype(req.out_dtype)
        for view in views.values():
            if is_float_like(view.dtype):
                return view.dtype
        return ref.dtype


def _die_with_parent(parent: int, kernel_signal: bool) -> None:
    """Never outlive the pool's process: the worker runs in its own session (so that killing it reaches
    what the user code spawned), hence a CI runner killing the job's process group would miss a worker
    stuck in user code. The kernel can send SIGKILL when the parent dies (Linux; only asked for when the
    parent's main thread started us, since the signal follows the starting thread); a watchdog thread
    covers other systems."""
    if kernel_signal and sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before we got here
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="gpuemu-parent-watch", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    """Worker entry point: `FD PARENT_PID [pdeathsig]`; serve requests on the socket until EOF or Shutdown."""
    args = sys.argv[1:] if argv is None else argv
    fd = int(args[0])
    if len(args) > 1:
        _die_with_parent(int(args[1]), kernel_signal=args[2:] == ["pdeathsig"])
    os.set_inheritable(fd, False)  # processes the user code starts must not keep our socket open
    os.dup2(2, 1)  # user prints go to the stderr log, never into the protocol
    faulthandler.enable()
    triton_probe.watch_imports()
    conn = Connection(fd)
    worker = Worker(conn)
    conn.send_bytes(dumps(Hello(os.getpid(), os.environ.get("TRITON_INTERPRET") == "1")))
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            return 0
        message = loads_request(data)
        if isinstance(message, Shutdown):
            return 0
        if isinstance(message, CaseRequest):
            worker.handle(message)
        else:
            raise TypeError(f"unexpected request {type(message).__name__}")


if __name__ == "__main__":
    sys.exit(main())
