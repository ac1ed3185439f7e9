"""One worker process seen from the parent: start it, send it cases, notice when it dies or hangs.

The process is a fresh interpreter (`python -m gpuemu_ci.backends.worker`, never a fork of this process, so
no threads, locks, CUDA context or signal handlers are inherited) in its own session, with its stderr and
stdout going to a log file whose tail is attached to failures. A crash (segfault, abort, `os._exit`), a case
that runs past its timeout, or a worker that reports an unusable GPU context is recorded on the case; the
process is then killed and a replacement started at once, so that it boots while the caller judges.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

from gpuemu_ci.backends.interface import CallResult, CallStatus, CallTarget, CaseJob, CaseRun
from gpuemu_ci.backends.protocol import (
    ArenaRef,
    CallDone,
    CaseDone,
    CaseRequest,
    Hello,
    Shutdown,
    Stage,
    dumps,
    loads_reply,
)
from gpuemu_ci.backends.transport import Arena, plan_inputs, recv_arrays, unpack_inline
from gpuemu_ci.errors import InfraError

_CALL_STAGES = (Stage.REFERENCE, Stage.REFERENCE_ABS, Stage.OP, Stage.RERUN)
_STAGE_WORDS = {
    Stage.IDLE: "before the case started",
    Stage.LOADING: "while importing the op and reference",
    Stage.REFERENCE: "in the reference call",
    Stage.REFERENCE_ABS: "in the reference call on |inputs|",
    Stage.OP: "in the op call",
    Stage.RERUN: "in the determinism re-run of the op",
    Stage.REPLY: "while sending results",
}
_LOG_LIMIT = 1 << 20  # the stderr log is truncated between cases once it grows past this


class _Failure(Exception):
    """The worker died or was killed while a case was running."""

    def __init__(self, status: CallStatus, message: str, stage: Stage) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.stage = stage


def _exit_words(returncode: int | None) -> str:
    if returncode is None:
        return "stopped responding"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        hint = " (the system's out-of-memory killer sends this)" if name == "SIGKILL" else ""
        return f"was killed by {name}{hint}"
    return f"exited with code {returncode}"


class WorkerProcess:
    """One job slot: a worker process (started lazily, replaced after failures) and its arena."""

    def __init__(
        self, index: int, pool_dir: Path, root: Path, env: dict[str, str], opts: dict[str, float]
    ) -> None:
        self.index = index
        self.root = root
        self.env = env
        self.opts = opts
        self.log_path = pool_dir / f"worker-{index}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.conn: Connection | None = None
        self.arena: Arena | None = None
        self.starts = 0
        self._poller: select.poll | None = None
        self._log_fd: int | None = None
        self._target_ids: dict[CallTarget, int] = {}  # targets this worker process already knows
        self._ready = False
        self.arena_wanted = 0  # the most arena bytes a case asked for (inputs + outputs): sizes the next one

    # ---- lifecycle ------------------------------------------------------------------------------------

    def spawn(self) -> None:
        """Start the process without waiting for it (it boots while the caller does other work)."""
        self.kill()
        parent_sock, child_sock = socket.socketpair()
        self.log_path.write_bytes(b"")  # a fresh log per process
        try:
            # O_APPEND: truncating the log between cases stays safe while the worker writes to it
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    self._command(child_sock.fileno()),
                    pass_fds=(child_sock.fileno(),),
                    cwd=self.root,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,  # so a kill reaches whatever the user code spawned
                )
        except OSError as exc:
            parent_sock.close()
            raise InfraError(f"could not start a gpuemu worker process ({sys.executable}): {exc}") from None
        finally:
            child_sock.close()
        self.conn = Connection(parent_sock.detach())
        self._poller = select.poll()
        self._poller.register(self.conn.fileno(), select.POLLIN)
        self._log_fd = os.open(self.log_path, os.O_RDONLY)
        self._target_ids = {}
        self._ready = False
        self.arena_wanted = 0  # the most arena bytes a case asked for (inputs + outputs): sizes the next one
        self.starts += 1

    @staticmethod
    def _command(fd: int) -> list[str]:
        command = [sys.executable, "-m", "gpuemu_ci.backends.worker", str(fd), str(os.getpid())]
        if threading.current_thread() is threading.main_thread():
            command.append("pdeathsig")  # the kernel's parent-death signal follows the starting thread
        return command

    def _await_ready(self) -> None:
        """Wait for the worker's Hello; InfraError with its stderr when it cannot start."""
        assert self.proc is not None and self.conn is not None
        deadline = time.monotonic() + self.opts["start_timeout_s"]
        try:
            while not self._readable(0.05):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise EOFError
            hello = loads_reply(self.conn.recv_bytes())
            if not isinstance(hello, Hello):
                raise EOFError
            self._ready = True
        except (EOFError, OSError, pickle.UnpicklingError):
            returncode = self.proc.poll()
            self.kill()
            raise InfraError(
                f"could not start a gpuemu worker process ({sys.executable} -m gpuemu_ci.backends.worker "
                f"{_exit_words(returncode)}):\n{self._tail(0)}"
            ) from None

    def kill(self) -> None:
        """Stop the process (and its process group) at once and drop its arena."""
        if self.proc is not None:
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
            self.proc = None
        self._drop_channel()

    def ask_to_stop(self) -> None:
        """Tell the worker to exit (without waiting): a pool asks all its workers first, then `stop`s each,
        so that they shut down side by side."""
        if self.proc is not None and self.proc.poll() is None and self.conn is not None:
            with contextlib.suppress(OSError):
                self.conn.send_bytes(dumps(Shutdown()))

    def stop(self, asked: bool = False) -> None:
        """Ask the worker to exit (unless `asked` already); kill it if it does not within a short grace."""
        if not asked:
            self.ask_to_stop()
        if self.proc is not None and self.proc.poll() is None and self._poller is not None:
            # The socket reads as closed the moment the process exits: wake up then, not at the next tick
            # of Popen.wait's sleep loop. Nothing of ours needs a clean exit, hence the short grace.
            deadline = time.monotonic() + 1.0
            with contextlib.suppress(OSError, EOFError):
                while self.proc.poll() is None and time.monotonic() < deadline:
                    if self._readable(deadline - time.monotonic()) and self.conn is not None:
                        self.conn.recv_bytes()  # a reply in flight, or EOF (raised) once the worker is gone
            with contextlib.suppress(subprocess.TimeoutExpired, EOFError):
                self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        self.kill()

    def _readable(self, timeout_s: float) -> bool:
        assert self._poller is not None
        return bool(self._poller.poll(max(0, int(timeout_s * 1000))))

    def _log_size(self) -> int:
        return os.fstat(self._log_fd).st_size if self._log_fd is not None else 0

    def _drop_channel(self) -> None:
        self._poller = None
        if self._log_fd is not None:
            os.close(self._log_fd)
            self._log_fd = None
        if self.conn is not None:
            with contextlib.suppress(OSError):
                self.conn.close()
            self.conn = None
        if self.arena is not None:
            self.arena.close()
            self.arena = None

    def _tail(self, start: int) -> str:
        """The last bytes the worker wrote to stderr/stdout since offset `start`."""
        limit = int(self.opts["tail_bytes"])
        try:
            with open(self.log_path, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                begin = max(start, size - limit)
                if begin >= size:
                    return ""
                f.seek(begin)
                data = f.read(size - begin)
        except OSError:
            return ""
        text = data.decode("utf-8", "replace")
        return ("…" + text) if begin > start else text

    # ---- one case -------------------------------------------------------------------------------------

    def run(self, job: CaseJob) -> CaseRun:
        """Run one case; failures of the user code are recorded in the CaseRun, never raised."""
        if self.proc is None or self.proc.poll() is not None:
            self.spawn()
        if not self._ready:
            self._await_ready()
        descs, needed, sources = plan_inputs(job.inputs)
        new_arena: ArenaRef | None = None
        if self.arena is None or self.arena.size < max(needed, self.arena_wanted):
            if self.arena is not None:
                self.arena.close()  # the worker keeps its own mapping until it switches
            # generous: untouched pages of a shared segment cost nothing, and outputs go behind the inputs
            self.arena = Arena(max(4 * needed + (4 << 20), self.arena_wanted + self.arena_wanted // 4))
            new_arena = self.arena.ref()
        self.arena.write_inputs(job.inputs, descs, sources)
        log_start = self._log_size()
        if log_start > _LOG_LIMIT:
            os.truncate(self.log_path, 0)
            log_start = 0
        new_targets = []
        for target in (job.reference, job.op):
            if target not in self._target_ids:
                self._target_ids[target] = len(self._target_ids)
                new_targets.append((self._target_ids[target], target))
        request = CaseRequest(
            reference=self._target_ids[job.reference],
            op=self._target_ids[job.op],
            inputs=descs,
            kwargs=dict(job.kwargs),
            out_arg=job.out_arg,
            out_dtype=job.out_dtype,
            rerun=job.rerun_for_determinism,
            abs_inputs=tuple(job.abs_reference_inputs),
            arena=new_arena,
            new_targets=tuple(new_targets),
        )
        calls: dict[Stage, CallResult] = {}
        done: CaseDone | None = None
        try:
            if self.conn is None:
                raise EOFError("no connection to the worker")
            self.conn.send_bytes(dumps(request))
            done = self._collect(job.timeout_s, calls)
        except _Failure as failed:
            self._rescue(calls)
            tail = self._tail(log_start)
            self._replace()
            return self._failed_run(job, calls, failed, tail)
        except (OSError, EOFError):  # the request could not even be sent: the worker is gone
            tail = self._tail(log_start)
            self._replace()
            gone = _Failure(CallStatus.CRASHED, "the worker process died before the case started", Stage.IDLE)
            return self._failed_run(job, calls, gone, tail)
        finally:
            if self.arena is not None:
                self.arena.unlink()  # the worker has mapped it (or is dead): the name can go
        self.arena_wanted = max(self.arena_wanted, done.arena_wanted)
        tail = self._tail(log_start) if any(c.status is not CallStatus.OK for c in calls.values()) else ""
        if done.retire:
            self._replace()
        return self._assemble(job, calls, done, tail)

    def _replace(self) -> None:
        """Kill this process and start its successor now; a start failure surfaces on the next run."""
        self.kill()
        with contextlib.suppress(InfraError):
            self.spawn()

    def _collect(self, timeout_s: float, calls: dict[Stage, CallResult]) -> CaseDone:
        """Read CallDone messages (with their frames) until CaseDone; raise _Failure on crash or timeout."""
        conn = self.conn
        arena = self.arena
        assert conn is not None and arena is not None and self.proc is not None
        load_limit = max(self.opts["load_timeout_s"], timeout_s)
        load_deadline = time.monotonic() + load_limit
        while True:
            loaded_at = arena.loaded_at()
            deadline = loaded_at + timeout_s if loaded_at > 0 else load_deadline
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                stage = arena.stage()
                what = (
                    f"the case took longer than its timeout of {timeout_s:g} s"
                    if loaded_at > 0
                    else f"loading the op and reference took longer than {load_limit:g} s"
                )
                raise _Failure(
                    CallStatus.TIMEOUT, f"{what} ({_STAGE_WORDS[stage]}); the worker was killed", stage
                )
            if arena.linked and arena.stage() is not Stage.IDLE:
                arena.unlink()  # the worker has mapped the new segment: its name need not outlive us
            try:
                if not self._readable(min(remaining, 0.02 if arena.linked else 0.5)):
                    if self.proc.poll() is None:
                        continue
                    raise EOFError
                message = loads_reply(conn.recv_bytes())
                if isinstance(message, CaseDone):
                    for call in message.calls:
                        self._record(call, calls)
                    return message
                if not isinstance(message, CallDone):
                    raise EOFError
                self._record(message, calls)
            except (EOFError, OSError, ValueError, pickle.UnpicklingError) as exc:
                stage = arena.stage()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=5)
                words = _exit_words(self.proc.poll())
                detail = f": {exc}" if isinstance(exc, ValueError) else ""
                raise _Failure(
                    CallStatus.CRASHED, f"the worker process {words} {_STAGE_WORDS[stage]}{detail}", stage
                ) from None

    def _rescue(self, calls: dict[Stage, CallResult]) -> None:
        """Recover the results the dead worker saved in the arena before its last call."""
        blob = self.arena.rescued() if self.arena is not None else None
        if blob is None:
            return
        with contextlib.suppress(Exception):  # a worker that died mid-write leaves nothing usable
            saved = loads_reply(blob)
            for done in saved if isinstance(saved, tuple) else ():
                if not isinstance(done, CallDone) or Stage(done.stage) in calls:
                    continue
                if done.payload is not None or all(d.arena_offset >= 0 for d in done.reply.outputs):
                    self._record(done, calls)

    def _record(self, done: CallDone, calls: dict[Stage, CallResult]) -> None:
        reply = done.reply
        if reply.outputs and all(d.arena_offset >= 0 for d in reply.outputs):
            assert self.arena is not None
            outputs = self.arena.read_outputs(reply.outputs)
        elif done.payload is not None:
            outputs = unpack_inline(done.payload, reply.outputs)
        else:
            assert self.conn is not None
            outputs = recv_arrays(self.conn, reply.outputs)
        status = CallStatus(reply.status)
        calls[Stage(done.stage)] = CallResult(status, outputs, reply.message, "", reply.duration_s)

    @staticmethod
    def _failed_run(job: CaseJob, calls: dict[Stage, CallResult], failure: _Failure, tail: str) -> CaseRun:
        """Results for a case whose worker died: the running call gets the failure, later ones say so."""
        running = failure.stage if failure.stage in _CALL_STAGES else None
        wanted = [Stage.REFERENCE]
        wanted += [Stage.REFERENCE_ABS] if job.abs_reference_inputs else []
        wanted += [Stage.OP] + ([Stage.RERUN] if job.rerun_for_determinism else [])
        for stage in wanted:
            if stage in calls:
                continue
            message = (
                failure.message if running is None or stage == running else f"not run: {failure.message}"
            )
            calls[stage] = CallResult(failure.status, (), message, tail)
        return CaseRun(
            reference=calls[Stage.REFERENCE],
            op=calls[Stage.OP],
            rerun=calls.get(Stage.RERUN),
            reference_abs=calls.get(Stage.REFERENCE_ABS),
        )

    @staticmethod
    def _assemble(job: CaseJob, calls: dict[Stage, CallResult], done: CaseDone, tail: str) -> CaseRun:
        def with_tail(result: CallResult | None) -> CallResult | None:
            if result is None or result.status is CallStatus.OK or not tail:
                return result
            return CallResult(result.status, result.outputs, result.message, tail, result.duration_s)

        reference = with_tail(calls.get(Stage.REFERENCE))
        op = with_tail(calls.get(Stage.OP))
        assert reference is not None and op is not None
        return CaseRun(
            reference=reference,
            op=op,
            rerun=with_tail(calls.get(Stage.RERUN)),
            reference_abs=with_tail(calls.get(Stage.REFERENCE_ABS)),
            inputs_modified=done.inputs_modified,
            interpreter=done.interpreter,
            interpreter_types=done.interpreter_types,
        )
