"""The worker process: runs the op side or the judge side of cases (op_side.py, judge_side.py) until told to stop.

Started by the pool as `python -m gpuemu_ci.backends.worker SOCKET_FD STATUS_FD PARENT_PID [pdeathsig]` (a
fresh interpreter: nothing inherited from the parent's state) in its own session, with stdout and stderr on
a pipe the parent drains into a bounded tail. SOCKET_FD carries the protocol's frames; STATUS_FD is a small
shared page where the worker writes what it is doing (for messages after a crash; never for deadlines).
Before each case the process state user code may have changed is put back (hygiene.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import mmap
import os
import signal
import socket
import struct
import sys
import threading
import time

import numpy as np

from gpuemu_ci.backends import calling, layer_probes, op_side, triton_probe
from gpuemu_ci.backends.channel import recv_frame, send_frame
from gpuemu_ci.backends.hygiene import Baseline
from gpuemu_ci.backends.interface import OpTask
from gpuemu_ci.backends.judge_side import OpView, run_judge_side
from gpuemu_ci.backends.op_side import run_op_side
from gpuemu_ci.backends.phases import PhaseClock
from gpuemu_ci.backends.protocol import (
    Built,
    CallReply,
    Hello,
    Judge,
    OpDone,
    OpPartial,
    OutputDesc,
    PlaceOutputs,
    Ready,
    Reply,
    RunOp,
    Shutdown,
    Stage,
    Verdict,
    dumps_reply,
    loads_request,
)
from gpuemu_ci.backends.transport import map_arena, place_outputs, read_outputs, span
from gpuemu_ci.calls import CallResult, CallStatus, CaseReport
from gpuemu_ci.results.base import without_surrogates
from gpuemu_ci.triton_cpu import guard

MESSAGE_LIMIT = 64 << 10  # characters of one message or stderr tail sent back


def _clip(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """At most `limit` characters, and encodable: a lone surrogate in user text (an exception message) becomes
    U+FFFD here, or the reply could not be sent at all."""
    text = without_surrogates(text)
    return (
        text if len(text) <= limit else text[: limit - 40] + f"… ({len(text) - limit + 40:,} more characters)"
    )


class Worker:
    """The worker side of the pool protocol: one per worker process, it loads tasks, runs the op and reference
    sides of cases on the inputs mapped from the arena, and judges them, replying over `sock`; `status`
    (shared memory) shows the pool which stage a call is in."""

    def __init__(self, sock: socket.socket, status: mmap.mmap | None) -> None:
        self.sock = sock
        self.status = status
        self.tasks: dict[str, OpTask] = {}
        self.current = 0  # the number of the side being run: every reply carries it
        self.clock = PhaseClock()

    def stage(self, stage: Stage) -> None:
        """Publishes the stage the current call is in, for the pool to read if the worker hangs or dies."""
        self.clock.mark(stage)
        if self.status is not None:
            struct.pack_into("<q", self.status, 0, int(stage))

    def send(self, message: Reply) -> None:
        """Sends one reply frame to the pool."""
        send_frame(self.sock, dumps_reply(message))

    def ready(self) -> None:
        """Tells the pool the worker is ready for its next request."""
        self.send(Ready(self.current))

    # ---- the op side -----------------------------------------------------------------------------------

    def run_op(self, request: RunOp, fds: list[int]) -> None:
        """Runs one side of a case on the inputs in the arena (`fds[0]`), placing its outputs back in the
        arena and replying with how the call ended."""
        task = self.tasks[request.key]
        self.clock.start()
        placement = _Placement(map_arena(fds[0], request.arena.size))
        early: dict[int, CallReply] = {}

        def first_call(result: CallResult) -> None:
            reply = placement.place(result)
            if reply is not None:
                early[id(result)] = reply
                self.stage(Stage.REPLY)
                self.send(OpPartial(self.current, reply))  # survives a re-run that kills this process

        try:
            side = run_op_side(
                task,
                request.case,
                stage=self.stage,
                on_first_call=first_call,
                on_loaded=self.ready,
                on_built=lambda digest: self.send(Built(self.current, digest)),
            )
            self.stage(Stage.REPLY)
            results = [side.op] + ([side.rerun] if side.rerun is not None else [])
            replies = [early.get(id(r)) or placement.place(r) for r in results]
        finally:
            placement.close()
        if any(r is None for r in replies):  # outputs larger than the arena: ask for a bigger one
            needed = span([a for r in results for a in r.outputs])
            self.send(
                OpDone(
                    self.current,
                    _reply(side.op),
                    None,
                    side.inputs_modified,
                    side.interpreter,
                    side.retire,
                    needed,
                    side.interpreter_types,
                    side.skipped,
                    side.triton,
                    side.not_run,
                    side.kernels,
                )
            )
            data, more_fds = recv_frame(self.sock)
            grant = loads_request(data)
            if not isinstance(grant, PlaceOutputs) or grant.task != self.current:
                raise SystemExit(0)  # the parent is shutting down
            placement = _Placement(map_arena(more_fds[0], grant.arena.size))
            try:
                replies = [placement.place(r) for r in results]
            finally:
                placement.close()
        op_reply, rerun_reply = replies[0], (replies[1] if len(replies) > 1 else None)
        if op_reply is None:
            op_reply = CallReply(
                CallStatus.CRASHED.value, "the outputs did not fit the arena the pool granted"
            )
        self.send(
            OpDone(
                self.current,
                op_reply,
                rerun_reply,
                side.inputs_modified,
                side.interpreter,
                side.retire,
                interpreter_types=side.interpreter_types,
                skipped=side.skipped,
                triton=side.triton,
                not_run=side.not_run,
                kernels=side.kernels,
                phases=self.clock.reading(),
            )
        )

    # ---- the judge side --------------------------------------------------------------------------------

    def judge(self, request: Judge, fds: list[int]) -> None:
        """Runs the judging side of a case (the reference, then the comparison with the op's outputs, read
        from the arena when given) and replies with the case's report."""
        task = self.tasks[request.key]
        self.clock.start()
        side = request.op_side
        outputs: tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]] = ((), ())
        if request.arena is not None:
            arena = map_arena(fds[0], request.arena.size)
            try:
                outputs = (
                    read_outputs(arena, side.op.outputs),
                    read_outputs(arena, side.rerun.outputs) if side.rerun is not None else (),
                )
            finally:
                arena.close()

        def result(reply: CallReply, arrays: tuple[np.ndarray, ...]) -> CallResult:
            status = CallStatus(reply.status)
            tail = side.op_stderr if status is not CallStatus.OK else ""
            return CallResult(status, arrays, reply.message, tail, reply.duration_s)

        view = OpView(
            result(side.op, outputs[0]),
            result(side.rerun, outputs[1]) if side.rerun is not None else None,
            side.inputs_modified,
            side.interpreter,
            side.interpreter_types,
            side.inputs_digest,
            side.skipped,
            side.triton,
            side.not_run,
            side.kernels,
        )
        report, retire = run_judge_side(task, request.case, view, stage=self.stage, on_loaded=self.ready)
        self.stage(Stage.REPLY)
        self.send(Verdict(self.current, _clipped(report), retire, self.clock.reading()))


def _reply(result: CallResult, descs: tuple[OutputDesc, ...] = ()) -> CallReply:
    return CallReply(result.status.value, _clip(result.message), result.duration_s, descs)


class _Placement:
    """Outputs written one after the other into an arena mapped for one case."""

    def __init__(self, arena: mmap.mmap) -> None:
        self.arena = arena
        self.cursor = 0

    def place(self, result: CallResult) -> CallReply | None:
        """The call's reply with its outputs in the arena, or None when they do not fit."""
        if self.cursor + span(result.outputs) > len(self.arena):
            return None
        descs, self.cursor = place_outputs(self.arena, self.cursor, result.outputs)
        return _reply(result, tuple(descs))

    def close(self) -> None:
        self.arena.close()


def _clipped(report: CaseReport) -> CaseReport:
    import msgspec

    return msgspec.structs.replace(
        report,
        message=_clip(report.message),
        findings=tuple((k, _clip(m)) for k, m in report.findings),
        stderr_tail=_clip(report.stderr_tail) if report.stderr_tail else report.stderr_tail,
    )


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
    """Worker entry point (`SOCKET_FD STATUS_FD PARENT_PID [pdeathsig]`): serve until EOF or Shutdown."""
    args = sys.argv[1:] if argv is None else argv
    return serve(int(args[0]), int(args[1]), int(args[2]), kernel_signal=args[3:] == ["pdeathsig"])


def serve(fd: int, status_fd: int, parent: int, *, kernel_signal: bool) -> int:
    """Serve the pool's requests on socket `fd` until EOF or Shutdown (stdout and stderr are the log pipe)."""
    _die_with_parent(parent, kernel_signal=kernel_signal)
    os.set_inheritable(fd, False)  # processes the user code starts must not keep our socket open
    os.set_inheritable(status_fd, False)
    os.dup2(2, 1)  # user prints go to the log, never into the protocol
    faulthandler.enable()
    triton_probe.watch_imports()  # before the baseline: every case is watched, the first included
    guard.watch((op_side, calling, layer_probes, triton_probe))  # the layer as shipped, before any user code
    sock = socket.socket(fileno=fd)
    sock.setblocking(True)
    status = mmap.mmap(status_fd, mmap.PAGESIZE)
    os.close(status_fd)
    worker = Worker(sock, status)
    baseline = Baseline.capture()  # before any user code runs
    worker.send(Hello(os.getpid()))
    while True:
        try:
            data, fds = recv_frame(sock)
        except (EOFError, OSError):
            return 0
        message = loads_request(data)
        if isinstance(message, Shutdown):
            return 0
        baseline.restore()  # whatever the last case left behind does not reach this one
        if isinstance(message, RunOp | Judge):
            worker.tasks.update((t.key, t) for t in message.tasks)
            worker.current = message.task
        if isinstance(message, RunOp):
            worker.run_op(message, fds)
        elif isinstance(message, Judge):
            worker.judge(message, fds)
        else:
            raise TypeError(f"unexpected request {type(message).__name__}")
        baseline.restore()  # and a timer it armed does not go off while the worker waits
        worker.stage(Stage.IDLE)


if __name__ == "__main__":
    sys.exit(main())
