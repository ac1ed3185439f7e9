"""Cases finish in any order, on any worker: an op's result must be the same whatever the order, the number of
jobs or the pool; the suite deadline must still stop new cases from starting."""

from __future__ import annotations

import random
import time
from pathlib import Path

import msgspec
import pytest

from gpuemu_ci.backends import WorkerPool
from gpuemu_ci.backends.interface import CaseSpec
from gpuemu_ci.config.load import load_config
from gpuemu_ci.pipeline.op_runner import MAX_RECORDED_FAILURES, OpCollector
from gpuemu_ci.pipeline.session import Session
from gpuemu_ci.pipeline.settings import RunOptions
from gpuemu_ci.plan.expand import plan_op
from gpuemu_ci.results.model import OpResult
from tests.conftest import EXAMPLES


@pytest.mark.slow
def test_an_ops_result_does_not_depend_on_jobs(tmp_path: Path) -> None:
    config = load_config(EXAMPLES / "buggy" / "gpuemu.toml", env={"GPUEMU_USER_CONFIG": "none"})
    op = config.op("softmax")
    cases = plan_op(op, 7, ("float32", "bfloat16"), 24)
    results = []
    for jobs in (1, 3):
        with Session(
            config, RunOptions(out_dir=tmp_path / f"j{jobs}", jobs=jobs, seed=7), gpu=None
        ) as session:
            results.append(session.run_op(op, cases))
    assert results[0].cases_failed > 0  # the tail-mask bug: failures are recorded, in case order
    indices = [f.case_index for f in results[0].failures]
    assert indices == sorted(i for i in indices if i is not None)
    assert untimed(results[0]) == untimed(results[1])


def untimed(result: OpResult) -> OpResult:
    """The result without the time its calls took (measured: every run's own)."""
    rows = tuple(msgspec.structs.replace(row, duration_s=None) for row in result.dtypes)
    return msgspec.structs.replace(result, dtypes=rows, timings=None)


@pytest.mark.slow
def test_an_ops_result_does_not_depend_on_the_order_its_cases_finish(tmp_path: Path) -> None:
    config = load_config(EXAMPLES / "buggy" / "gpuemu.toml", env={"GPUEMU_USER_CONFIG": "none"})
    op = config.op("softmax")
    cases = plan_op(op, 7, ("float32", "bfloat16"), 48)  # more failures than are recorded
    with Session(config, RunOptions(out_dir=tmp_path, jobs=2, seed=7), gpu=None) as session:
        task = session.task(op)
        reports = [(ref, session.pool.submit(task, CaseSpec(ref.seed, ref.index)).result()) for ref in cases]
    outcomes = []
    for shuffle in range(3):
        random.Random(shuffle).shuffle(reports)
        collector = OpCollector(config, op)
        for ref, report in reports:
            collector.add(ref, report)
        outcomes.append(collector.result())
    assert outcomes[0].cases_failed > MAX_RECORDED_FAILURES and outcomes[0].failures_omitted > 0
    assert outcomes[0] == outcomes[1] == outcomes[2]
    assert [d.dtype for d in outcomes[0].dtypes] == ["float32", "bfloat16"]  # config order, not arrival


@pytest.mark.slow
def test_the_deadline_stops_queued_cases_that_have_not_started(tmp_path: Path, make_project) -> None:
    calls = tmp_path / "calls.log"
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
            "slowops.py": f"""
            import time

            def slow(x):
                with open({str(calls)!r}, "a") as f:
                    f.write("call\\n")
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
    with Session(config, RunOptions(out_dir=tmp_path, jobs=1), gpu=None) as session:
        session.run_case(op, CaseSpec(cases[0].seed, cases[0].index))  # the workers have booted
        calls.unlink()
        results, cut_short = session.run_ops([(op, cases, None)], deadline=time.monotonic() + 0.5)
    result = results["slow"]
    assert cut_short and 0 < result.cases_total < len(cases)
    # Every case a worker started was judged and counted; the queued ones were dropped unstarted.
    assert len(calls.read_text().splitlines()) == result.cases_total


def test_a_pool_that_cannot_start_a_worker_is_an_infrastructure_error(tmp_path: Path) -> None:
    import pytest

    from gpuemu_ci.errors import InfraError

    config = load_config(EXAMPLES / "quickstart" / "gpuemu.toml", env={"GPUEMU_USER_CONFIG": "none"})
    op = config.ops[0]
    pool = WorkerPool(
        1, config.root, env={"PYTHONPATH": "/nonexistent", "PYTHONHOME": "/nonexistent"}, gpu=None
    )
    try:
        with (
            Session(
                config, RunOptions(out_dir=tmp_path), pool_factory=lambda jobs: pool, gpu=None
            ) as session,
            pytest.raises(InfraError, match="could not start a gpuemu worker"),
        ):
            session.run_op(op, session.plan(op))
    finally:
        pool.close()
