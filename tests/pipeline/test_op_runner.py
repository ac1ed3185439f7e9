"""OpRunner keeps cases in flight (it generates the next ones and judges finished ones while a worker
computes): the results must be exactly those of running the cases one by one, and the suite deadline must
still stop new cases from starting."""

from __future__ import annotations

import time
from concurrent.futures import Future
from pathlib import Path

from gpuemu_ci.backends import WorkerPool
from gpuemu_ci.backends.interface import CaseJob, CaseRun
from gpuemu_ci.config.load import load_config
from gpuemu_ci.pipeline.op_runner import OpRunner
from gpuemu_ci.plan.expand import plan_op
from gpuemu_ci.progress import Silent
from tests.conftest import EXAMPLES


class RunOnly:
    """A pool whose `submit` runs the case to the end at once: OpRunner then builds the next case only after."""

    def __init__(self, pool: WorkerPool) -> None:
        self.pool = pool

    def run(self, job: CaseJob) -> CaseRun:
        return self.pool.run(job)

    def submit(self, job: CaseJob) -> Future[CaseRun]:
        future: Future[CaseRun] = Future()
        future.set_result(self.pool.run(job))
        return future

    def close(self) -> None:
        self.pool.close()


class Counting(WorkerPool):
    """Counts the cases a worker actually started (submit() goes through run())."""

    started = 0

    def run(self, job: CaseJob) -> CaseRun:
        self.started += 1
        return super().run(job)


def test_cases_in_flight_give_the_same_result_as_one_at_a_time(tmp_path: Path) -> None:
    config = load_config(EXAMPLES / "buggy" / "gpuemu.toml", env={"GPUEMU_USER_CONFIG": "none"})
    op = config.op("softmax")
    cases = plan_op(op, 7, ("float32", "bfloat16"), 24)
    with WorkerPool(1, root=config.root, gpu=None) as pool:
        queued = OpRunner(config, op, pool, tmp_path / "queued", 7, Silent()).run(cases)
        serial = OpRunner(config, op, RunOnly(pool), tmp_path / "serial", 7, Silent()).run(cases)
    assert queued.cases_failed > 0  # the tail-mask bug: failures are recorded, in case order
    assert queued == serial


def test_the_deadline_stops_queued_cases_that_have_not_started(tmp_path: Path, make_project) -> None:
    config_path = make_project(
        """
        [project]
        name = "slow"

        [[ops]]
        name = "slow"
        op = "slowops:slow"
        reference = "slowops:ref"
        family = "elementwise"
        [ops.dims]
        N = [64]
        [ops.inputs]
        x = ["N"]
        """,
        {
            "slowops.py": """
            import time

            def slow(x):
                time.sleep(0.05)
                return x.copy()

            def ref(x):
                return x
            """
        },
    )
    config = load_config(config_path, env={"GPUEMU_USER_CONFIG": "none"})
    op = config.op("slow")
    cases = plan_op(op, 1, op.dtypes, 60)
    with Counting(1, root=config.root, gpu=None) as pool:
        OpRunner(config, op, pool, tmp_path, 1, Silent()).run_case(cases[0])  # the worker has booted
        pool.started = 0
        runner = OpRunner(config, op, pool, tmp_path, 1, Silent(), deadline=time.monotonic() + 0.5)
        result = runner.run(cases)
        started = pool.started
    assert runner.cut_short and result.cases_total < len(cases)
    # Every case a worker started was judged and counted; the queued ones were dropped unstarted.
    assert started == result.cases_total
