"""WorkerPool: runs CaseJobs in persistent, isolated worker processes, one per parallel job.

`run(job)` may be called from several threads (each call takes a free worker), and `submit(job)` returns a
Future, so a caller can build and judge cases while a worker computes. The pool never raises for what user
code does (see process.py); it raises InfraError only when no worker process can be started at all.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import tempfile
import threading
import weakref
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from gpuemu_ci.backends.gpu import GpuInfo, detect_gpu
from gpuemu_ci.backends.interface import CaseJob, CaseRun
from gpuemu_ci.backends.process import WorkerProcess
from gpuemu_ci.errors import InfraError
from gpuemu_ci.launch import python_env

_AUTO = object()


def _worker_env(extra: Mapping[str, str] | None, gpu: GpuInfo | None, jobs: int) -> dict[str, str]:
    env = python_env({**os.environ, **(extra or {})})  # a source checkout must be importable by `python -m`
    env["PYTHONUNBUFFERED"] = "1"  # user prints reach the log before a crash
    if gpu is None:
        env.setdefault("TRITON_INTERPRET", "1")  # must be set before triton is imported
    if jobs > 1:  # parallel workers on few cores: do not let every BLAS/OpenMP pool take all of them
        threads = str(max(1, (os.cpu_count() or 1) // jobs))
        for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env.setdefault(name, threads)
    return env


def _shutdown(workers: list[WorkerProcess], pool_dir: Path, executor: list[ThreadPoolExecutor]) -> None:
    for ex in executor:
        ex.shutdown(wait=True)
    for worker in workers:
        worker.ask_to_stop()
    for worker in workers:
        worker.stop(asked=True)
    shutil.rmtree(pool_dir, ignore_errors=True)


class WorkerPool:
    """Runs CaseJobs in `jobs` persistent worker processes; `run` may be called from several threads.

    root: the working directory of the workers (the config's directory). env: extra environment variables.
    gpu: the detected GPU (detected when not given); without one, TRITON_INTERPRET=1 is set for the workers.
    The processes are started at once, so they boot while the caller plans and generates its first cases.
    Close the pool (or use it as a context manager) when done: close() waits for submitted cases, and
    must not be called while other threads are inside run() (their cases would end as crashed).
    """

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
    ) -> None:
        self.jobs = max(1, int(jobs))
        self.root = Path(root if root is not None else Path.cwd()).resolve()
        self.gpu: GpuInfo | None = detect_gpu() if gpu is _AUTO else gpu  # type: ignore[assignment]
        self.env = _worker_env(env, self.gpu, self.jobs)
        self._dir = Path(tempfile.mkdtemp(prefix="gpuemu-workers-"))
        opts = {
            "start_timeout_s": start_timeout_s,
            "load_timeout_s": load_timeout_s,
            "tail_bytes": tail_bytes,
        }
        self._workers = [WorkerProcess(i, self._dir, self.root, self.env, opts) for i in range(self.jobs)]
        self._idle: queue.Queue[WorkerProcess] = queue.Queue()
        for worker in self._workers:
            self._idle.put(worker)
        self._closed = False
        self._executor: list[ThreadPoolExecutor] = []  # created by the first submit()
        self._executor_lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _shutdown, self._workers, self._dir, self._executor)
        for worker in self._workers:
            with contextlib.suppress(InfraError):  # reported by the first run() that needs this worker
                worker.spawn()

    @property
    def worker_starts(self) -> int:
        """How many worker processes were started so far (replacements included)."""
        return sum(w.starts for w in self._workers)

    def run(self, job: CaseJob) -> CaseRun:
        """Run one case in a free worker (blocks until one is free). Raises InfraError only when no worker
        process can be started at all."""
        if self._closed:
            raise RuntimeError("WorkerPool is closed")
        for name, arr in job.inputs.items():
            if not isinstance(arr, np.ndarray):
                raise TypeError(f"CaseJob input {name!r} must be a numpy array, not {type(arr).__name__}")
        worker = self._idle.get()
        try:
            return worker.run(job)
        finally:
            self._idle.put(worker)

    def submit(self, job: CaseJob) -> Future[CaseRun]:
        """Queue a case; the Future resolves to its CaseRun (or the exception `run` would raise). At most
        `jobs` cases run at once; the others wait in order."""
        if self._closed:
            raise RuntimeError("WorkerPool is closed")
        with self._executor_lock:
            if not self._executor:
                self._executor.append(ThreadPoolExecutor(self.jobs, thread_name_prefix="gpuemu-pool"))
            return self._executor[0].submit(self.run, job)

    def close(self) -> None:
        """Stop every worker, release shared memory and the log directory. Idempotent."""
        self._closed = True
        self._finalizer()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
