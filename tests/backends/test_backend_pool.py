"""Worker isolation: crashes, hangs and OOM become recorded failures with the case's seed, and the pool keeps
working. Every case here runs in real worker processes: the op in one, its judge in another."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from gpuemu_ci.backends import WorkerPool
from gpuemu_ci.backends.interface import CaseSpec, OpTask
from gpuemu_ci.calls import CaseReport
from tests.backends.support_cases import first_case, op_task


def _run(
    pool: WorkerPool, root: Path, op: str, reference: str = "backend_ops:ref_add", **kw: object
) -> CaseReport:
    task = op_task(root, op, reference, **kw)  # type: ignore[arg-type]
    return pool.run(task, first_case(task))


def _assert_pool_still_works(pool: WorkerPool, root: Path) -> None:
    report = _run(pool, root, "backend_ops:add", extra='family = "elementwise"\nkwargs = { scale = [2.0] }')
    assert report.outcome == "passed", report.message
    wrong = _run(pool, root, "backend_ops:wrong_add")
    assert wrong.outcome == "failed" and wrong.kind == "mismatch"


@pytest.mark.parametrize(
    ("op", "words", "stderr_words"),
    [
        ("backend_ops:segfault", "SIGSEGV", "about to touch address 0"),
        ("backend_ops:abort", "SIGABRT", "aborting now"),
        ("backend_ops:hard_exit", "exited with code 3", ""),
    ],
)
def test_worker_death_is_recorded_and_the_worker_replaced(
    pool: WorkerPool, user_root: Path, op: str, words: str, stderr_words: str
) -> None:
    _assert_pool_still_works(pool, user_root)
    starts = pool.worker_starts
    report = _run(pool, user_root, op)
    assert report.outcome == "failed" and report.kind == "crashed"
    assert words in report.message and "in the op call" in report.message
    assert stderr_words in (report.stderr_tail or "")
    assert set(report.shapes) == {"a", "b"} and report.dtype == "float32"  # described by the judge
    _assert_pool_still_works(pool, user_root)
    assert pool.worker_starts == starts + 1


def test_segfault_stderr_tail_has_the_python_traceback(pool: WorkerPool, user_root: Path) -> None:
    report = _run(pool, user_root, "backend_ops:segfault")
    assert "Fatal Python error: Segmentation fault" in (report.stderr_tail or "")
    assert "backend_ops.py" in (report.stderr_tail or "") and "in segfault" in (report.stderr_tail or "")


@pytest.mark.slow
def test_hang_past_the_case_timeout_is_killed(pool: WorkerPool, user_root: Path) -> None:
    _assert_pool_still_works(pool, user_root)  # loaded: the timeout is the case's, not the first load's
    report = _run(
        pool, user_root, "backend_ops:hang", timeout=1.0, extra='family = "elementwise"\ndeterministic = true'
    )
    assert report.outcome == "failed" and report.kind == "timeout"
    assert "timeout of 1 s" in report.message and "in the op call" in report.message
    assert "going to sleep" in (report.stderr_tail or "")  # user prints land in the captured output
    _assert_pool_still_works(pool, user_root)


@pytest.mark.slow
def test_timeout_in_the_reference_means_the_case_could_not_be_judged(
    pool: WorkerPool, user_root: Path
) -> None:
    report = _run(pool, user_root, "backend_ops:add", reference="backend_ops:hang", timeout=1.0)
    assert report.outcome == "errored" and report.kind == "timeout"
    assert report.message.startswith("the reference timed out:") and "in the reference call" in report.message
    _assert_pool_still_works(pool, user_root)


def test_memory_error_is_oom_and_keeps_the_worker(pool: WorkerPool, user_root: Path) -> None:
    _assert_pool_still_works(pool, user_root)
    starts = pool.worker_starts
    report = _run(pool, user_root, "backend_ops:huge")
    assert report.outcome == "failed" and report.kind == "oom"
    assert "MemoryError" in report.message and "backend_ops.py" in report.message
    _assert_pool_still_works(pool, user_root)
    assert pool.worker_starts == starts  # Python recovered: no restart needed


def test_device_out_of_memory_is_oom(pool: WorkerPool, user_root: Path) -> None:
    report = _run(pool, user_root, "backend_ops:device_oom")
    assert report.kind == "oom" and "CUDA out of memory" in report.message


def test_sticky_cuda_error_is_a_crash_and_the_worker_is_replaced(pool: WorkerPool, user_root: Path) -> None:
    _assert_pool_still_works(pool, user_root)
    starts = pool.worker_starts
    report = _run(
        pool, user_root, "backend_ops:sticky_cuda", extra='family = "elementwise"\ndeterministic = true'
    )
    assert report.kind == "crashed" and "illegal memory access" in report.message
    assert pool.worker_starts == starts + 1
    _assert_pool_still_works(pool, user_root)


def test_exception_reports_type_message_and_user_frames_only(pool: WorkerPool, user_root: Path) -> None:
    report = _run(pool, user_root, "backend_ops:raises")
    assert report.kind == "raised"
    text = report.message
    assert f"ValueError: bad shape {report.shapes['a']}" in text
    assert "in raises" in text and "in _helper" in text
    assert "gpuemu_ci" not in text  # no frames of the worker itself


@pytest.mark.parametrize(
    ("spec", "who", "words"),
    [
        ("no_such_module:f", "op", "cannot import module 'no_such_module'"),
        ("backend_ops:missing", "op", "has no attribute 'missing'"),
        ("broken:f", "op", "RuntimeError: boom while importing"),
    ],
)
def test_import_errors_say_what_is_missing(
    pool: WorkerPool, user_root: Path, spec: str, who: str, words: str
) -> None:
    report = _run(pool, user_root, spec)
    assert report.outcome == "unloadable" and report.unloadable == who
    assert words in report.message


def test_a_reference_that_does_not_load(pool: WorkerPool, user_root: Path) -> None:
    report = _run(pool, user_root, "backend_ops:add", reference="backend_ops:nope")
    assert report.outcome == "unloadable" and report.unloadable == "reference"
    assert "has no attribute 'nope'" in report.message


@pytest.mark.parametrize(
    ("op", "words"),
    [
        ("backend_ops:returns_none", "returned None"),
        ("backend_ops:returns_dict", "returned a dict"),
        ("backend_ops:returns_objects", "object dtype"),
    ],
)
def test_bad_outputs(pool: WorkerPool, user_root: Path, op: str, words: str) -> None:
    report = _run(pool, user_root, op)
    assert report.kind == "bad_output" and words in report.message


@pytest.mark.slow
def test_nothing_of_a_worker_lives_in_the_file_system(user_root: Path, tmp_path: Path) -> None:
    """Arenas and status pages are anonymous memory: no /dev/shm name (which a killed gate would leave
    behind), no temporary file, even after crashes and timeouts."""

    def named() -> set[str]:  # what this process's pool (or a worker of it) could have named
        if not os.path.isdir("/dev/shm"):
            return set()
        return {
            n for n in os.listdir("/dev/shm") if n.startswith(("gpuemu", "psm_")) and str(os.getpid()) in n
        }

    before = named()
    with WorkerPool(2, user_root, env={"TMPDIR": str(tmp_path)}, gpu=None) as p:
        for op in ("backend_ops:add", "backend_ops:segfault", "backend_ops:big", "backend_ops:hang"):
            reference = "backend_ops:big_ref" if op == "backend_ops:big" else "backend_ops:ref_add"
            task = op_task(user_root, op, reference, timeout=1)
            p.run(task, first_case(task))
            for slot in p._slots:  # every arena a worker holds is a memfd, never a named segment
                if slot.proc is not None:
                    try:  # a worker that has just exited has no maps to read
                        maps = Path(f"/proc/{slot.proc.pid}/maps").read_text()
                    except OSError:
                        continue
                    assert "/dev/shm" not in maps
        assert named() == before
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_an_ops_cases_spread_over_every_worker_from_threads(user_root: Path) -> None:
    task = op_task(user_root, "backend_ops:add")
    crash = op_task(user_root, "backend_ops:segfault")
    outcomes: list[str] = []
    lock = threading.Lock()
    with WorkerPool(2, user_root, gpu=None) as p:

        def work(which: object, n: int) -> None:
            report = p.run(which, first_case(which, n))  # type: ignore[arg-type]
            with lock:
                outcomes.append(report.outcome)

        threads = [threading.Thread(target=work, args=(task, n)) for n in range(8)]
        threads.append(threading.Thread(target=work, args=(crash, 0)))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes) == ["failed"] + ["passed"] * 8
        assert p.worker_starts == 4  # three slots (two jobs and a spare for judges), one replacement


@pytest.mark.slow
def test_closed_pool_refuses_work(user_root: Path) -> None:
    p = WorkerPool(1, user_root, gpu=None)
    p.close()
    task = op_task(user_root, "backend_ops:add")
    with pytest.raises(RuntimeError):
        p.submit(task, first_case(task))


def test_script_based_op_and_reference_script(pool: WorkerPool, user_root: Path) -> None:
    report = _run(
        pool,
        user_root,
        "scripts/op_script.py",
        reference="scripts/ref_script.py",
        extra='family = "elementwise"\nkwargs = { scale = [3.0] }',
    )
    assert report.outcome == "passed", report.message


def test_op_script_written_for_upstream_runs_over_its_protocol(pool: WorkerPool, user_root: Path) -> None:
    """An op script with no `run`/`op` function is run as upstream runs scripts: JSON in, JSON out."""
    report = _run(pool, user_root, "scripts/ref_script.py", reference="scripts/ref_script.py")
    assert report.outcome == "passed", report.message


def test_submit_returns_futures_that_resolve(pool: WorkerPool, user_root: Path) -> None:
    task = op_task(user_root, "backend_ops:add")
    futures = [pool.submit(task, first_case(task, n)) for n in range(6)]
    assert [f.result(timeout=120).outcome for f in futures] == ["passed"] * 6


PARENT_SCRIPT = """
import sys, time
from pathlib import Path
from gpuemu_ci.backends import WorkerPool
from tests.backends.support_cases import first_case, op_task

root = Path(sys.argv[1])
pool = WorkerPool(1, root, gpu=None)
task = op_task(root, "backend_ops:hang", timeout=600)
pool.submit(task, first_case(task))
while True:
    slot = next((s for s in pool._slots if s.case is not None and s.proc is not None), None)
    if slot is not None:
        slot.proc.drain_log()
        if b"going to sleep" in bytes(slot.proc.log.data):
            break
    time.sleep(0.05)
print(" ".join(str(s.proc.pid) for s in pool._slots if s.proc is not None), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads process states from /proc")
def test_workers_do_not_outlive_a_killed_parent(user_root: Path, tmp_path: Path) -> None:
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
    pids = [int(p) for p in parent.stdout.readline().split()]
    assert pids and all(_alive(pid) for pid in pids)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    parent.stdout.close()
    for _ in range(100):  # one worker sits in a hanging op: only the parent-death signal can stop it
        if not any(_alive(pid) for pid in pids):
            break
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in pids)


@pytest.mark.slow
def test_workers_start_as_fresh_interpreters_where_they_cannot_be_forked(user_root: Path) -> None:
    """The zygote is a speed-up: without it (not Linux, or it cannot start) workers start one by one."""
    with WorkerPool(1, user_root, gpu=None, fork_workers=False) as p:
        assert p.run(*_case(user_root, "backend_ops:add")).outcome == "passed"
        crashed = p.run(*_case(user_root, "backend_ops:segfault"))
        assert crashed.kind == "crashed" and "SIGSEGV" in crashed.message
        assert p.run(*_case(user_root, "backend_ops:add")).outcome == "passed"


def _case(root: Path, op: str) -> tuple[OpTask, CaseSpec]:
    task = op_task(root, op)
    return task, first_case(task)
