"""Worker isolation: crashes, hangs and OOM become recorded failures and the pool keeps working."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from gpuemu_ci.backends import WorkerPool
from gpuemu_ci.backends.interface import CallStatus, CaseJob, TargetKind
from tests.backends.support_jobs import make_job, pair, target


def _assert_pool_still_works(pool: WorkerPool, root: Path) -> None:
    run = pool.run(make_job(root, "userops:add", pair(), kwargs={"scale": 2.0}))
    assert run.op.status is CallStatus.OK, run.op.message
    np.testing.assert_array_equal(run.op.outputs[0], (pair()["a"] + 1) * 2)
    np.testing.assert_array_equal(run.reference.outputs[0], run.op.outputs[0].astype(np.float64))


@pytest.mark.parametrize(
    ("op", "words", "stderr_words"),
    [
        ("userops:segfault", "SIGSEGV", "about to touch address 0"),
        ("userops:abort", "SIGABRT", "aborting now"),
        ("userops:hard_exit", "exited with code 3", ""),
    ],
)
def test_worker_death_is_recorded_and_the_worker_replaced(
    pool: WorkerPool, user_root: Path, op: str, words: str, stderr_words: str
) -> None:
    _assert_pool_still_works(pool, user_root)  # a live worker first
    starts = pool.worker_starts
    run = pool.run(make_job(user_root, op, pair()))
    assert run.op.status is CallStatus.CRASHED
    assert words in run.op.message and "in the op call" in run.op.message
    assert stderr_words in run.op.stderr_tail
    # the reference ran before the crash and its result survived it
    assert run.reference.status is CallStatus.OK
    np.testing.assert_array_equal(run.reference.outputs[0], pair()["a"] + 1.0)
    _assert_pool_still_works(pool, user_root)
    assert pool.worker_starts == starts + 1


def test_segfault_stderr_tail_has_the_python_traceback(pool: WorkerPool, user_root: Path) -> None:
    run = pool.run(make_job(user_root, "userops:segfault", pair()))
    assert "Fatal Python error: Segmentation fault" in run.op.stderr_tail
    assert "userops.py" in run.op.stderr_tail and "in segfault" in run.op.stderr_tail


def test_hang_past_the_case_timeout_is_killed(pool: WorkerPool, user_root: Path) -> None:
    run = pool.run(make_job(user_root, "userops:hang", pair(), timeout_s=0.5, rerun_for_determinism=True))
    assert run.op.status is CallStatus.TIMEOUT
    assert "timeout of 0.5 s" in run.op.message and "in the op call" in run.op.message
    assert "going to sleep" in run.op.stderr_tail  # user prints land in the captured log
    assert run.rerun is not None and run.rerun.status is CallStatus.TIMEOUT
    assert run.rerun.message.startswith("not run:")
    assert run.reference.status is CallStatus.OK
    _assert_pool_still_works(pool, user_root)


def test_timeout_in_the_reference_marks_the_op_not_run(pool: WorkerPool, user_root: Path) -> None:
    run = pool.run(make_job(user_root, "userops:add", pair(), reference="userops:hang", timeout_s=0.5))
    assert run.reference.status is CallStatus.TIMEOUT and "in the reference call" in run.reference.message
    assert run.op.status is CallStatus.TIMEOUT and run.op.message.startswith("not run:")
    _assert_pool_still_works(pool, user_root)


def test_memory_error_is_oom_and_keeps_the_worker(pool: WorkerPool, user_root: Path) -> None:
    _assert_pool_still_works(pool, user_root)
    starts = pool.worker_starts
    run = pool.run(make_job(user_root, "userops:huge", pair()))
    assert run.op.status is CallStatus.OOM
    assert "MemoryError" in run.op.message and "userops.py" in run.op.message
    _assert_pool_still_works(pool, user_root)
    assert pool.worker_starts == starts  # Python recovered: no restart needed


def test_device_out_of_memory_is_oom(pool: WorkerPool, user_root: Path) -> None:
    run = pool.run(make_job(user_root, "userops:device_oom", pair()))
    assert run.op.status is CallStatus.OOM and "CUDA out of memory" in run.op.message


def test_sticky_cuda_error_is_a_crash_and_the_worker_is_replaced(pool: WorkerPool, user_root: Path) -> None:
    _assert_pool_still_works(pool, user_root)
    starts = pool.worker_starts
    run = pool.run(make_job(user_root, "userops:sticky_cuda", pair(), rerun_for_determinism=True))
    assert run.op.status is CallStatus.CRASHED and "illegal memory access" in run.op.message
    assert (
        run.rerun is not None and run.rerun.status is CallStatus.CRASHED
    )  # never re-run on a broken context
    assert run.rerun.message.startswith("not run")
    assert pool.worker_starts == starts + 1
    _assert_pool_still_works(pool, user_root)


def test_exception_reports_type_message_and_user_frames_only(pool: WorkerPool, user_root: Path) -> None:
    run = pool.run(make_job(user_root, "userops:raises", pair()))
    assert run.op.status is CallStatus.RAISED
    first, *frames = run.op.message.splitlines()
    assert first == "ValueError: bad shape (4, 6)"
    text = "\n".join(frames)
    assert "in raises" in text and "in _helper" in text
    assert "gpuemu_ci" not in text  # no frames of the worker itself


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("no_such_module:f", "cannot import module 'no_such_module'"),
        ("userops:missing", "has no attribute 'missing'"),
        ("broken:f", "RuntimeError: boom while importing"),
        ("userops", "must look like 'package.module:function'"),
    ],
)
def test_import_errors_say_what_is_missing(pool: WorkerPool, user_root: Path, spec: str, words: str) -> None:
    run = pool.run(make_job(user_root, spec, pair()))
    assert run.op.status is CallStatus.IMPORT_ERROR
    assert words in run.op.message
    assert run.reference.status is CallStatus.OK  # the reference still ran


@pytest.mark.parametrize(
    ("op", "words"),
    [
        ("userops:returns_none", "returned None"),
        ("userops:returns_dict", "returned a dict"),
        ("userops:returns_objects", "object dtype"),
    ],
)
def test_bad_outputs(pool: WorkerPool, user_root: Path, op: str, words: str) -> None:
    run = pool.run(make_job(user_root, op, pair()))
    assert run.op.status is CallStatus.BAD_OUTPUT
    assert words in run.op.message


def _shm_entries() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith(f"gpuemu_{os.getpid()}_")}


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm to list POSIX shared memory")
def test_no_shared_memory_left_behind_after_crashes_timeouts_and_close(user_root: Path) -> None:
    before = _shm_entries()
    big = {"a": np.ones((600, 700), np.float32), "b": np.ones((600, 700), np.float32)}  # forces arena growth
    with WorkerPool(2, user_root, gpu=None) as p:
        for op in ("userops:add", "userops:segfault", "userops:add", "userops:hang", "userops:add"):
            p.run(make_job(user_root, op, pair(), timeout_s=0.5))
            assert _shm_entries() == before
        assert p.run(make_job(user_root, "userops:add", big)).op.status is CallStatus.OK
        assert _shm_entries() == before
    assert _shm_entries() == before


def test_parallel_jobs_from_threads(user_root: Path) -> None:
    results: list[CallStatus] = []
    lock = threading.Lock()

    with WorkerPool(2, user_root, gpu=None) as p:

        def work(op: str) -> None:
            run = p.run(make_job(user_root, op, pair(), timeout_s=5))
            with lock:
                results.append(run.op.status)

        threads = [
            threading.Thread(target=work, args=(op,)) for op in ["userops:add"] * 6 + ["userops:segfault"]
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(s.value for s in results) == ["crashed"] + ["ok"] * 6
        assert p.worker_starts <= 3  # two slots, one replacement


def test_closed_pool_refuses_work(user_root: Path) -> None:
    p = WorkerPool(1, user_root, gpu=None)
    p.close()
    with pytest.raises(RuntimeError):
        p.run(make_job(user_root, "userops:add", pair()))


def test_non_array_input_is_a_programming_error(pool: WorkerPool, user_root: Path) -> None:
    job = CaseJob(
        op=target(user_root, "userops:add"),
        reference=target(user_root, "userops:ref_add"),
        inputs={"a": [1.0, 2.0], "b": np.ones(2)},  # type: ignore[dict-item]
    )
    with pytest.raises(TypeError, match="must be a numpy array"):
        pool.run(job)


def test_script_based_op_and_reference_script(pool: WorkerPool, user_root: Path) -> None:
    job = CaseJob(
        op=target(user_root, "scripts/op_script.py", TargetKind.OP_SCRIPT),
        reference=target(user_root, "scripts/ref_script.py", TargetKind.REFERENCE_SCRIPT),
        inputs=pair(),
        kwargs={"scale": 3.0},
    )
    run = pool.run(job)
    assert run.op.status is CallStatus.OK and run.reference.status is CallStatus.OK
    np.testing.assert_array_equal(run.op.outputs[0], pair()["a"] + 3.0)
    assert run.reference.outputs[0].dtype == np.float64
    np.testing.assert_array_equal(run.reference.outputs[0], pair()["a"] + 3.0)


def test_script_without_the_expected_function(pool: WorkerPool, user_root: Path) -> None:
    job = CaseJob(
        op=target(user_root, "scripts/ref_script.py", TargetKind.OP_SCRIPT),  # defines reference(), not run()
        reference=target(user_root, "scripts/missing.py", TargetKind.REFERENCE_SCRIPT),
        inputs=pair(),
    )
    run = pool.run(job)
    assert run.op.status is CallStatus.IMPORT_ERROR and "defines no function `run(" in run.op.message
    assert run.reference.status is CallStatus.IMPORT_ERROR and "script not found" in run.reference.message


def test_submit_returns_futures_that_resolve_in_order(pool: WorkerPool, user_root: Path) -> None:
    futures = [
        pool.submit(make_job(user_root, "userops:add", pair(), kwargs={"scale": float(s)})) for s in range(4)
    ]
    outputs = [f.result(timeout=60).op.outputs[0] for f in futures]
    for scale, out in enumerate(outputs):
        np.testing.assert_array_equal(out, (pair()["a"] + 1) * scale)


def test_arena_in_a_file_when_shared_memory_is_too_small(
    user_root: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import gpuemu_ci.backends.transport as transport

    monkeypatch.setattr(transport, "_shm_has_room", lambda size: False)  # as in a container's 64 MiB /dev/shm
    monkeypatch.setattr(transport.tempfile, "tempdir", str(tmp_path))
    with WorkerPool(1, user_root, gpu=None) as p:
        run = p.run(make_job(user_root, "userops:add", pair(), kwargs={"scale": 2.0}))
        assert run.op.status is CallStatus.OK, run.op.message
        np.testing.assert_array_equal(run.op.outputs[0], (pair()["a"] + 1) * 2)
        arenas = [f for f in tmp_path.iterdir() if f.name.startswith("gpuemu_")]
        assert arenas == []  # unlinked as soon as the worker had it mapped
        crashed = p.run(make_job(user_root, "userops:segfault", pair()))
        assert crashed.op.status is CallStatus.CRASHED
        np.testing.assert_array_equal(crashed.reference.outputs[0], pair()["a"] + 1.0)
    assert list(tmp_path.iterdir()) == []  # no arena file, and the workers' log directory is gone


PARENT_SCRIPT = """
import sys, threading, time
from pathlib import Path
from gpuemu_ci.backends import WorkerPool
from tests.backends.support_jobs import make_job, pair

root = Path(sys.argv[1])
pool = WorkerPool(1, root, gpu=None)
job = make_job(root, "userops:hang", pair(), timeout_s=600)
threading.Thread(target=pool.run, args=(job,), daemon=True).start()
worker = pool._workers[0]
while "going to sleep" not in worker.log_path.read_text():  # the worker is inside the hanging op
    time.sleep(0.05)
print(worker.proc.pid, pool._dir, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads process states from /proc")
def test_worker_does_not_outlive_a_killed_parent(user_root: Path, tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "parent.py"
    script.write_text(PARENT_SCRIPT)
    repo = Path(__file__).resolve().parents[2]
    parent = subprocess.Popen(
        [sys.executable, str(script), str(user_root)], stdout=subprocess.PIPE, text=True, cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )  # fmt: skip
    assert parent.stdout is not None
    pid_text, pool_dir = parent.stdout.readline().split()
    worker_pid = int(pid_text)
    assert _alive(worker_pid)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    for _ in range(100):  # the worker sits in a hanging op: only the parent-death signal can stop it
        if not _alive(worker_pid):
            break
        time.sleep(0.1)
    shutil.rmtree(pool_dir, ignore_errors=True)  # a SIGKILLed pool cannot remove its own log directory
    assert not _alive(worker_pid)
