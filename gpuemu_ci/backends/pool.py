"""WorkerPool: runs cases, from their seeds, in persistent isolated worker processes.

Each case has two sides (op_side.py, judge_side.py): the op side, in one worker, and the judge side, in
another; the op's outputs cross from the first to the second once, through a shared-memory arena the pool
owns. `jobs` is the
number of processes computing at once (one core each); the pool keeps `jobs + 1` processes, so a judge can
always run outside the process that ran its op. An op's cases spread over every worker.

One scheduler thread owns the workers: it dispatches sides, reads replies and output (never blocking on a
worker), and enforces deadlines on its own clock. What user code does never raises here: a crash, a timeout,
an OOM kill or a reply that does not parse ends that side as a recorded failure with the case's seed, and the
worker is replaced. InfraError only when no worker process can be started at all.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from gpuemu_ci.backends import phases, shipped_inputs, zygote
from gpuemu_ci.backends.channel import FrameError
from gpuemu_ci.backends.gpu import GpuInfo, detect_gpu
from gpuemu_ci.backends.interface import CaseAborted, CaseSpec, OpTask, generating_party
from gpuemu_ci.backends.oom import OomRecord
from gpuemu_ci.backends.process import WorkerProcess, exit_words
from gpuemu_ci.backends.protocol import (
    STAGE_WORDS,
    ArenaGrant,
    Built,
    CallReply,
    Hello,
    Judge,
    OpDone,
    OpPartial,
    OpSideResult,
    PlaceOutputs,
    Ready,
    RunOp,
    Shutdown,
    Stage,
    Verdict,
    loads_reply,
)
from gpuemu_ci.backends.transport import Arena, check_outputs
from gpuemu_ci.backends.zygote import ForkCancelled, ForkServer, ZygoteError
from gpuemu_ci.calls import CallStatus, CaseReport
from gpuemu_ci.errors import InfraError
from gpuemu_ci.launch import available_cores, python_env

_AUTO = object()
_STATUSES = frozenset(s.value for s in CallStatus)
FIRST_ARENA = 1 << 20


def _settle(future: Future[CaseReport], error: BaseException, *, cancel_queued: bool) -> None:
    """End a future that has no result yet: a running one fails with `error`; a queued one is cancelled
    (`cancel_queued`) or fails too. Waiters are woken either way (a plain `cancel()` does not wake wait())."""
    if future.done() and not future.cancelled():
        return
    if not future.running() and cancel_queued:
        future.cancel()
    with contextlib.suppress(RuntimeError):  # already running: it refuses, and says so in the log
        if not future.running() and not future.set_running_or_notify_cancel():
            return  # cancelled, and now notified
    future.set_exception(error)


def _worker_env(extra: Mapping[str, str] | None, gpu: GpuInfo | None, jobs: int) -> dict[str, str]:
    env = python_env({**os.environ, **(extra or {})})  # a source checkout must be importable by `python -m`
    env["PYTHONUNBUFFERED"] = "1"  # user prints reach the log before a crash
    if gpu is None:
        env.setdefault("TRITON_INTERPRET", "1")  # must be set before triton is imported
    threads = str(max(1, (os.cpu_count() or 1) // jobs))
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(name, threads)  # parallel workers must not each take every core for BLAS
    return env


@dataclass
class _Case:
    task: OpTask
    spec: CaseSpec
    future: Future[CaseReport]
    arena: Arena | None = None
    op_pid: int | None = None
    partial: CallReply | None = None
    op_side: OpSideResult | None = None
    op_digest: str = ""  # the digest of the inputs the op's side built (Built)
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase, both sides (phases.py)
    built: bool = False  # the pool tried to build its inputs (shipped_inputs.py)


@dataclass
class _Slot:
    """One job slot: its current process and what that process is doing."""

    index: int
    proc: WorkerProcess | None = None
    ready: bool = False
    case: _Case | None = None
    side: str = ""  # "op" | "place" | "judge"
    readied: bool = False  # the worker said its imports are done: the case's timer runs
    side_started: float = 0.0
    task: int = 0  # the number of the side it runs (replies must carry it)
    started: float = 0.0
    deadline: float = 0.0
    log_mark: int = 0
    sent: set[str] = field(default_factory=set)  # op tasks this process knows
    loaded: set[tuple[str, str]] = field(default_factory=set)  # (task key, side) it has run before
    failed_starts: int = 0
    start_error: str = ""
    oom_mark: OomRecord | None = None  # the kernel's OOM-kill counts when the side started
    asked: float = 0.0  # when its process was asked for (started, or forked by the zygote)
    start_s: float = 0.0  # its process's start-up, not yet charged to a case (phases.py)


class WorkerPool:
    """Runs cases in `jobs` (+1) persistent worker processes. `submit` from any thread.

    root: the working directory of the workers (the config's directory). env: extra environment variables.
    gpu: the detected GPU (detected when not given); without one, TRITON_INTERPRET=1 is set for the workers.
    The processes start at once, so they boot while the caller plans. close() waits for submitted cases;
    abort() stops at once."""

    def __init__(
        self,
        jobs: int = 1,
        root: Path | None = None,
        env: Mapping[str, str] | None = None,
        *,
        gpu: GpuInfo | object | None = _AUTO,
        start_timeout_s: float = 120.0,
        load_timeout_s: float = 300.0,
        tail_bytes: int = 4000,
        fork_workers: bool = True,
        ship_inputs: bool | None = None,
    ) -> None:
        self.jobs = max(1, int(jobs))
        self.root = Path(root if root is not None else Path.cwd()).resolve()
        self.gpu: GpuInfo | None = detect_gpu() if gpu is _AUTO else gpu  # type: ignore[assignment]
        self.env = _worker_env(env, self.gpu, self.jobs)
        self.start_timeout_s = start_timeout_s
        self.load_timeout_s = load_timeout_s
        self.tail_bytes = tail_bytes
        self.fork_workers = fork_workers  # from a zygote (zygote.py), where the platform allows
        # Build a small case's inputs here once for both sides (shipped_inputs.py). By default only where a core
        # is left for this process: with as many jobs as cores, building here delays every dispatch behind
        # the workers, and the run is slower although it computes less (docs/benchmarks.md, issue #48).
        self.ship_inputs = self.jobs < available_cores() if ship_inputs is None else ship_inputs
        self.worker_starts = 0
        self.side_s = 0.0  # seconds sides ran, summed over slots: side_s / (jobs x wall) is how busy it kept
        self._lock = threading.Lock()
        self._incoming: deque[_Case] = deque()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._closing = False
        self._aborting = False
        self._closed = False
        self._error: InfraError | None = None
        self._thread = threading.Thread(target=self._serve, name="gpuemu-pool", daemon=True)
        self._thread.start()

    # ---- the caller's side -------------------------------------------------------------------------------

    def submit(self, task: OpTask, case: CaseSpec) -> Future[CaseReport]:
        """Queue a case; the future resolves to its report. Cancel it to drop a case not started yet."""
        future: Future[CaseReport] = Future()
        with self._lock:
            if self._closing:
                raise RuntimeError("WorkerPool is closed")
            if self._error is not None:
                raise self._error
            self._incoming.append(_Case(task, case, future))
        self._wake()
        return future

    def run(self, task: OpTask, case: CaseSpec) -> CaseReport:
        """Run one case and wait for it."""
        return self.submit(task, case).result()

    def abort(self) -> None:
        """Stop now: queued cases are cancelled, running ones killed (CaseAborted); then close."""
        with self._lock:
            self._aborting = True
        self.close()

    def close(self) -> None:
        """Finish the submitted cases, stop every worker (and whatever it started) and release everything.
        Idempotent."""
        with self._lock:
            self._closing = True
        self._wake()
        if threading.current_thread() is not self._thread:
            self._thread.join()
        if not self._closed:
            self._closed = True
            for fd in (self._wake_r, self._wake_w):
                with contextlib.suppress(OSError):
                    os.close(fd)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"x")

    # ---- the scheduler thread ----------------------------------------------------------------------------

    def _serve(self) -> None:
        slots = [_Slot(i) for i in range(self.jobs + 1)]
        self._slots = slots
        self._op_queue: deque[_Case] = deque()
        self._judge_queue: deque[_Case] = deque()
        self._free_arenas: list[Arena] = []
        self._want: dict[str, int] = {}
        self._sides = 0
        self._forkserver: ForkServer | None = None
        if self.fork_workers and zygote.available():
            with contextlib.suppress(ZygoteError):
                self._forkserver = ForkServer(self.root, self.env)
        try:
            for slot in slots:
                self._spawn(slot)
            while True:
                with self._lock:
                    self._op_queue.extend(self._incoming)
                    self._incoming.clear()
                    closing, aborting = self._closing, self._aborting
                if aborting:
                    break
                busy = [s for s in slots if s.case is not None]
                if closing and not busy and not self._op_queue and not self._judge_queue:
                    break
                self._dispatch()
                self._wait_and_handle(busy=self._build_ahead())
                self._check_deadlines()
        except BaseException as exc:  # a bug here must not hang the caller's futures
            self._fail_all(
                exc if isinstance(exc, InfraError) else InfraError(f"the worker pool failed: {exc!r}")
            )
        finally:
            self._shutdown(slots)

    def _fail_all(self, error: InfraError) -> None:
        with self._lock:
            self._error = error
            pending = list(self._incoming)
            self._incoming.clear()
        pending += list(self._op_queue) + list(self._judge_queue)
        pending += [s.case for s in self._slots if s.case is not None]
        for case in pending:
            _settle(case.future, error, cancel_queued=False)

    def _shutdown(self, slots: list[_Slot]) -> None:
        """Stop every worker: ask, give them a moment, then kill their process groups whatever they did."""
        aborting = self._aborting
        leftover = (
            list(self._op_queue) + list(self._judge_queue) + [s.case for s in slots if s.case is not None]
        )
        with self._lock:
            leftover += list(self._incoming)
            self._incoming.clear()
        for case in leftover:
            _settle(case.future, CaseAborted("the run was stopped"), cancel_queued=True)
        for slot in slots:
            if slot.proc is not None and not aborting and slot.case is None:
                with contextlib.suppress(OSError, TimeoutError):
                    slot.proc.send(Shutdown())
        if aborting and self._forkserver is not None:
            # Stopping now: kill every worker's process group, then the zygote, and wait for no report of how
            # each ended (the zygote, itself perhaps busy or importing, would be the one to send it).
            for slot in slots:
                if slot.proc is not None:
                    slot.proc.signal_group()
            self._forkserver.close()
        deadline = time.monotonic() + (0.0 if aborting else 1.0)
        for slot in slots:
            if slot.proc is not None:
                slot.proc.wait(max(0.0, deadline - time.monotonic()))
                slot.proc.close()  # kills the process group in every case
                slot.proc = None
        for case in leftover:
            self._release_arena(case)
        for arena in self._free_arenas:
            arena.close()
        self._free_arenas.clear()
        if self._forkserver is not None:
            self._forkserver.close()

    def _spawn(self, slot: _Slot) -> None:
        if slot.proc is not None:
            slot.proc.close()
        slot.proc, slot.ready, slot.case, slot.side = None, False, None, ""
        slot.sent, slot.loaded = set(), set()
        if self._aborting:
            return  # stopping: no new worker (the zygote may still be importing)
        asked = time.monotonic()  # a fork waits for the zygote's imports: part of this worker's start
        try:
            try:
                slot.proc = WorkerProcess(self.root, self.env, self._forkserver, self._stopping)
            except ForkCancelled:
                return
            except ZygoteError:  # no fork server after all: start workers the plain way from now on
                if self._forkserver is not None:
                    self._forkserver.close()
                self._forkserver = None
                slot.proc = WorkerProcess(self.root, self.env)
        except InfraError as exc:
            slot.failed_starts += 1
            slot.start_error = exc.message
            self._check_starts()
            return
        self.worker_starts += 1
        slot.started = time.monotonic()
        slot.asked = asked

    def _stopping(self) -> bool:
        """Whether abort() was called: a fork that waits for the zygote gives up at once."""
        return self._aborting

    def _check_starts(self) -> None:
        """Two processes at least must be able to run: a case's judge never runs where its op ran."""
        dead = [s for s in self._slots if s.proc is None and s.failed_starts >= 2]
        if len(self._slots) - len(dead) < 2:
            raise InfraError(dead[0].start_error or "no gpuemu worker process could be started")

    # ---- dispatching -------------------------------------------------------------------------------------

    def _idle(self) -> list[_Slot]:
        return [s for s in self._slots if s.proc is not None and s.ready and s.case is None]

    def _dispatch(self) -> None:
        while sum(1 for s in self._slots if s.case is not None) < self.jobs:
            idle = self._idle()
            if not idle:
                return
            judged = self._next_judge(idle)
            if judged is not None:
                case, slot = judged
                self._start_judge(slot, case)
                continue
            awaiting = len(self._judge_queue) + sum(1 for s in self._slots if s.side == "judge")
            if not self._op_queue or awaiting > 2 * self.jobs:
                return
            case = self._op_queue.popleft()
            if not case.future.set_running_or_notify_cancel():
                continue  # cancelled before it started
            slot = max(idle, key=lambda s: ((case.task.key, "op") in s.loaded, -s.index))
            self._start_op(slot, case)

    def _next_judge(self, idle: list[_Slot]) -> tuple[_Case, _Slot] | None:
        for case in self._judge_queue:
            others = [s for s in idle if s.proc is not None and s.proc.pid != case.op_pid]
            if others:
                self._judge_queue.remove(case)
                slot = max(others, key=lambda s: ((case.task.key, "judge") in s.loaded, -s.index))
                return case, slot
        return None

    def _tasks_for(self, slot: _Slot, task: OpTask) -> tuple[OpTask, ...]:
        if task.key in slot.sent:
            return ()
        slot.sent.add(task.key)
        return (task,)

    def _begin(self, slot: _Slot, case: _Case, side: str) -> None:
        assert slot.proc is not None
        self._sides += 1
        slot.case, slot.side, slot.task = case, side, self._sides
        slot.side_started = time.monotonic()
        slot.oom_mark = OomRecord.now()
        slot.proc.drain_log()
        slot.log_mark = slot.proc.log.total
        slot.readied = False
        slot.deadline = time.monotonic() + self.load_timeout_s  # until it says Ready: importing
        if slot.start_s:  # the first case on a new process waited for it
            case.phases["worker_start"] = case.phases.get("worker_start", 0.0) + slot.start_s
            slot.start_s = 0.0

    def _start_op(self, slot: _Slot, case: _Case) -> None:
        assert slot.proc is not None
        case.arena = self._take_arena(self._want.get(case.task.key, FIRST_ARENA))
        case.op_pid = slot.proc.pid
        self._build(case)
        self._begin(slot, case, "op")
        request = RunOp(
            slot.task, case.task.key, case.spec, ArenaGrant(case.arena.size), self._tasks_for(slot, case.task)
        )
        self._send(slot, request, (case.arena.fd,))

    def _build(self, case: _Case) -> None:
        """The case's inputs built here once for both sides (shipped_inputs.py), unless already tried."""
        if self.ship_inputs and not case.built:
            case.built = True
            case.spec, seconds = shipped_inputs.ship(case.task, case.spec)
            if seconds:
                case.phases["inputs"] = case.phases.get("inputs", 0.0) + seconds

    def _build_ahead(self) -> bool:
        """Build the inputs of one of the next queued cases while the workers compute, so that a free worker
        gets its next case at once; whether there are more to build."""
        ahead = [c for c in list(self._op_queue)[: self.jobs] if not c.built] if self.ship_inputs else []
        if not ahead or not any(s.case is not None for s in self._slots):
            return False
        self._build(ahead[0])
        return len(ahead) > 1

    def _start_judge(self, slot: _Slot, case: _Case) -> None:
        assert case.op_side is not None
        self._begin(slot, case, "judge")
        rerun = case.op_side.rerun
        has_outputs = bool(case.op_side.op.outputs) or (rerun is not None and bool(rerun.outputs))
        grant = ArenaGrant(case.arena.size) if has_outputs and case.arena is not None else None
        fds = (case.arena.fd,) if grant is not None and case.arena is not None else ()
        request = Judge(
            slot.task, case.task.key, case.spec, case.op_side, grant, self._tasks_for(slot, case.task)
        )
        self._send(slot, request, fds)

    def _send(self, slot: _Slot, request: object, fds: tuple[int, ...]) -> None:
        assert slot.proc is not None
        try:
            slot.proc.send(request, fds)
        except (OSError, TimeoutError):
            self._side_failed(slot, CallStatus.CRASHED, "the worker process died before the case started")

    # ---- arenas --------------------------------------------------------------------------------------------

    def _take_arena(self, size: int) -> Arena:
        fitting = [a for a in self._free_arenas if a.size >= size]
        if fitting:
            arena = min(fitting, key=lambda a: a.size)
        elif self._free_arenas:
            arena = max(self._free_arenas, key=lambda a: a.size)
            arena.resize(size)
        else:
            return Arena(size)
        self._free_arenas.remove(arena)
        return arena

    def _release_arena(self, case: _Case) -> None:
        if case.arena is not None:
            if self._closing and self._aborting:
                case.arena.close()
            else:
                self._free_arenas.append(case.arena)
            case.arena = None

    # ---- events ------------------------------------------------------------------------------------------

    def _wait_and_handle(self, *, busy: bool = False) -> None:
        """Handle what the workers sent; `busy`: there is more to do here, so only what has arrived."""
        now = time.monotonic()
        waits = [s.deadline - now for s in self._slots if s.case is not None]
        waits += [
            s.started + self.start_timeout_s - now for s in self._slots if s.proc is not None and not s.ready
        ]
        timeout = 0.0 if busy else max(0.0, min([0.5, *waits]))
        poller = select.poll()
        routes: dict[int, tuple[_Slot, str]] = {}
        for slot in self._slots:
            if slot.proc is None:
                continue
            routes[slot.proc.sock.fileno()] = (slot, "sock")
            poller.register(slot.proc.sock.fileno(), select.POLLIN)
            if slot.proc.log_fd >= 0:
                routes[slot.proc.log_fd] = (slot, "log")
                poller.register(slot.proc.log_fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        if self._forkserver is not None and not self._forkserver.broken:
            routes[self._forkserver.fileno()] = (self._slots[0], "zygote")
            poller.register(self._forkserver.fileno(), select.POLLIN)
        events = poller.poll(timeout * 1000)
        for fd, _event in events:
            if fd == self._wake_r:
                with contextlib.suppress(BlockingIOError, OSError):
                    while os.read(self._wake_r, 4096):
                        pass
                continue
            slot, kind = routes[fd]
            if kind == "zygote":
                if self._forkserver is not None:
                    self._forkserver.poll()  # exit statuses of workers
                continue
            if slot.proc is None or slot.proc.closed:
                continue
            if kind == "log":
                slot.proc.drain_log()
            else:
                self._read_replies(slot)

    def _read_replies(self, slot: _Slot) -> None:
        proc = slot.proc
        assert proc is not None
        try:
            frames, closed = proc.reader.feed(proc.sock)
            for frame in frames:
                self._handle(slot, loads_reply(frame))
                if slot.proc is not proc:  # the worker was replaced while handling
                    return
        except (msgspec.DecodeError, FrameError, ValueError) as exc:
            self._bad_reply(slot, str(exc))
            return
        if closed and slot.proc is proc:
            self._died(slot)

    def _bad_reply(self, slot: _Slot, why: str) -> None:
        if slot.case is None:  # between cases nothing can be wrong but the worker itself: replace it
            self._spawn(slot)
            return
        self._side_failed(
            slot, CallStatus.CRASHED, f"the worker process sent a reply that does not parse ({why})"
        )

    def _died(self, slot: _Slot) -> None:
        proc = slot.proc
        assert proc is not None
        returncode = proc.wait(0.5)  # a crash closes the socket as the process exits
        oom_killed = OomRecord.now().killed_since(slot.oom_mark) if slot.oom_mark is not None else None
        words = exit_words(returncode, oom_killed)
        if not slot.ready:
            proc.drain_log()
            slot.failed_starts += 1
            slot.start_error = (
                f"could not start a gpuemu worker process (python -m gpuemu_ci.backends.worker {words}):\n"
                + proc.log.since(0, self.tail_bytes)
            )
            proc.close()
            slot.proc = None
            self._check_starts()
            if slot.failed_starts < 2:
                self._spawn(slot)
            return
        if slot.case is None:
            self._spawn(slot)
            return
        self._side_failed(slot, CallStatus.CRASHED, f"the worker process {words} {STAGE_WORDS[proc.stage()]}")

    def _handle(self, slot: _Slot, reply: object) -> None:
        if isinstance(reply, Hello):
            if slot.ready:
                raise ValueError("a second Hello")
            slot.ready, slot.failed_starts = True, 0
            slot.start_s = time.monotonic() - slot.asked
            return
        case = slot.case
        if case is None:
            raise ValueError(f"a {type(reply).__name__} while no case runs")
        if getattr(reply, "task", None) != slot.task:
            raise ValueError(f"a {type(reply).__name__} for another case")
        if isinstance(reply, Ready) and slot.side in ("op", "judge") and not slot.readied:
            slot.readied = True
            slot.deadline = time.monotonic() + case.task.timeout_s  # the parent's clock, from now
        elif slot.side == "op" and isinstance(reply, Built):
            case.op_digest = reply.inputs_digest
        elif slot.side in ("op", "place") and isinstance(reply, OpPartial):
            self._check_call(reply.op, case)
            case.partial = reply.op
        elif slot.side in ("op", "place") and isinstance(reply, OpDone):
            self._op_done(slot, case, reply)
        elif slot.side == "judge" and isinstance(reply, Verdict):
            self._verdict(slot, case, reply)
        else:
            raise ValueError(f"a {type(reply).__name__} while the worker runs the {slot.side} side")

    def _check_call(self, reply: CallReply, case: _Case) -> None:
        if reply.status not in _STATUSES:
            raise ValueError(f"call status {reply.status!r}")
        size = case.arena.size if case.arena is not None else 0
        check_outputs(reply.outputs, size)

    def _op_done(self, slot: _Slot, case: _Case, done: OpDone) -> None:
        assert slot.proc is not None and case.arena is not None
        if done.needs > 0:
            if slot.side == "place" or done.needs > 1 << 40:
                raise ValueError(f"asked for {done.needs} arena bytes")
            wanted = done.needs + done.needs // 8
            self._want[case.task.key] = max(self._want.get(case.task.key, 0), wanted)
            case.arena.resize(wanted)
            slot.side, slot.readied = "place", True
            slot.deadline = time.monotonic() + case.task.timeout_s
            self._send(slot, PlaceOutputs(slot.task, ArenaGrant(case.arena.size)), (case.arena.fd,))
            return
        for call in (done.op, done.rerun):
            if call is not None:
                self._check_call(call, case)
        slot.loaded.add((case.task.key, "op"))
        phases.charge(case.phases, done.phases, time.monotonic() - slot.side_started)
        used = max((d.offset + d.nbytes for c in (done.op, done.rerun) if c for d in c.outputs), default=0)
        self._want[case.task.key] = max(self._want.get(case.task.key, FIRST_ARENA), used + used // 8)
        failed = any(c is not None and c.status != CallStatus.OK.value for c in (done.op, done.rerun))
        tail = self._tail(slot) if failed else ""
        case.op_side = OpSideResult(
            done.op,
            done.rerun,
            done.inputs_modified,
            done.interpreter,
            tail,
            done.interpreter_types,
            case.op_digest,
            done.skipped,
            done.triton,
            done.not_run,
            done.kernels,
        )
        self._finish_side(slot, retire=done.retire)
        self._queue_judge(case)

    def _queue_judge(self, case: _Case) -> None:
        assert case.op_side is not None
        if case.op_side.op.status == CallStatus.IMPORT_ERROR.value:  # nothing to judge: the op does not load
            report = CaseReport(outcome="unloadable", unloadable="op", message=case.op_side.op.message)
            self._resolve(case, report)
            return
        self._judge_queue.append(case)

    def _verdict(self, slot: _Slot, case: _Case, verdict: Verdict) -> None:
        report = verdict.report
        slot.loaded.add((case.task.key, "judge"))
        phases.charge(case.phases, verdict.phases, time.monotonic() - slot.side_started)
        if report.outcome == "errored" and not report.stderr_tail:
            tail = self._tail(slot)
            report = msgspec.structs.replace(report, stderr_tail=tail or None)
        self._finish_side(slot, retire=verdict.retire)
        self._resolve(case, report)

    def _resolve(self, case: _Case, report: CaseReport) -> None:
        self._release_arena(case)
        if case.phases:
            report = msgspec.structs.replace(report, phases=dict(sorted(case.phases.items())))
        if not case.future.done():
            case.future.set_result(report)

    def _tail(self, slot: _Slot) -> str:
        assert slot.proc is not None
        slot.proc.drain_log()
        return slot.proc.log.since(slot.log_mark, self.tail_bytes)

    def _finish_side(self, slot: _Slot, *, retire: bool) -> None:
        self.side_s += time.monotonic() - slot.side_started
        slot.case, slot.side = None, ""
        if retire:
            self._spawn(slot)

    # ---- failures of a side ------------------------------------------------------------------------------

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        for slot in self._slots:
            if slot.proc is None:
                continue
            if not slot.ready and now > slot.started + self.start_timeout_s:
                slot.proc.kill()
                self._died(slot)
                continue
            if slot.case is not None and now > slot.deadline:
                stage = slot.proc.stage()
                what = (
                    f"the case took longer than its timeout of {slot.case.task.timeout_s:g} s"
                    if slot.readied
                    else f"loading the op and reference took longer than {self.load_timeout_s:g} s"
                )
                self._side_failed(
                    slot, CallStatus.TIMEOUT, f"{what} ({STAGE_WORDS[stage]}); the worker was killed"
                )

    def _side_failed(self, slot: _Slot, status: CallStatus, message: str) -> None:
        """The side running in `slot` ends with `status`: record it on the case, replace the worker."""
        case, side = slot.case, slot.side
        assert slot.proc is not None
        stage = slot.proc.stage()
        slot.proc.kill()
        tail = self._tail(slot)
        self.side_s += time.monotonic() - slot.side_started
        if case is not None:
            phases.charge_stage(case.phases, stage, time.monotonic() - slot.side_started)
        slot.case, slot.side = None, ""
        self._spawn(slot)
        if case is None:
            return
        if side in ("op", "place"):
            case.op_side = self._failed_op_side(case, status, message, stage, tail)
            self._queue_judge(case)
            return
        who = {
            Stage.LOADING: "reference",  # the judge's worker imports the reference (and the hooks it calls)
            Stage.REFERENCE: "reference",
            Stage.REFERENCE_ABS: "reference",
            Stage.NAIVE: "naive implementation",
            Stage.GENERATING: generating_party(case.task),
        }.get(stage, "judge")
        from gpuemu_ci.plan.expand import stratum

        kind = "timeout" if status is CallStatus.TIMEOUT else "crashed"
        chosen = stratum(case.task.op, case.spec.seed)
        report = CaseReport(
            outcome="errored",
            dtype=chosen.dtype,
            distribution=chosen.mode.value,
            aligned=chosen.aligned,
            kind=kind,
            message=f"the {who} {status.words}: {message}",
            stderr_tail=tail or None,
            party=who,
        )
        self._resolve(case, report)

    def _failed_op_side(
        self, case: _Case, status: CallStatus, message: str, stage: Stage, tail: str
    ) -> OpSideResult:
        """The op side of a case whose worker died: the running call gets the failure, later ones say so."""
        deterministic = case.task.op.execution.deterministic
        failure = CallReply(status.value, message)
        not_run = CallReply(status.value, f"not run: {message}")
        digest = case.op_digest  # what it built before it died: the judge still checks it
        if (
            stage is Stage.GENERATING
        ):  # before the op was called: its inputs hook's, or gpuemu-ci's own, doing
            who = generating_party(case.task)
            failed = CallReply(status.value, f"not run: the {who} {status.words}: {message}")
            return OpSideResult(failed, None, (), None, tail, inputs_digest=digest, not_run=who)
        if stage is Stage.RERUN and case.partial is not None:
            return OpSideResult(case.partial, failure, (), None, tail, inputs_digest=digest)
        if stage is Stage.RERUN:
            lost = CallReply(CallStatus.CRASHED.value, f"its outputs were lost: {message}")
            return OpSideResult(lost, failure, (), None, tail, inputs_digest=digest)
        return OpSideResult(failure, not_run if deterministic else None, (), None, tail, inputs_digest=digest)
