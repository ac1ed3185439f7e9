"""Where the seconds go: every run's results.json says, per op, how long each phase of its cases took
(results/timings.py), `--profile` prints it, and none of it reaches a verdict, the signed statement or a
comparison of two runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuemu_ci.backends.phases import PhaseClock, charge
from gpuemu_ci.backends.protocol import Stage
from gpuemu_ci.results.timings import PHASES, OpTimings, summed
from gpuemu_ci.triton_cpu import spent
from tests.attest.test_statement import build
from tests.conftest import EXAMPLES, REPO
from tests.support_cli import run_cli


def test_a_forged_worker_figure_is_bounded_by_the_pools_own_clock() -> None:
    into: dict[str, float] = {}
    charge(into, {"op": 1e9, "judge": float("nan"), "verdict": 5.0, "inputs": -3.0}, 2.0)
    assert into == {"op": 2.0, "inputs": 0.0, "transport": 0.0}  # never more than the side took
    into = {}
    charge(into, {"op": 0.5, "reference": 0.25}, 1.0)
    assert into == {"op": 0.5, "reference": 0.25, "transport": 0.25}  # the rest: between pool and worker


def test_triton_preparation_is_taken_out_of_the_op_calls() -> None:
    clock = PhaseClock()
    clock.start()
    clock.mark(Stage.OP)
    spent.add(1e-9)  # less than the op stage took: all of it moves
    clock.mark(Stage.REPLY)
    reading = clock.reading()
    assert reading["triton_prepare"] == pytest.approx(1e-9)
    assert set(reading) == {"op", "triton_prepare", "transport"}
    clock.start()
    spent.add(100.0)  # never more than the op's calls took
    clock.mark(Stage.OP)
    clock.mark(Stage.IDLE)
    second = clock.reading()
    assert second["triton_prepare"] == pytest.approx(0.0, abs=1e-3) and second["op"] >= 0.0


def test_shards_add_up() -> None:
    one = OpTimings(cases=3, op_s=1.25, judge_s=0.5)
    two = OpTimings(cases=2, op_s=0.75, inputs_s=0.125)
    total = summed([one, None, two])
    assert total == OpTimings(cases=5, op_s=2.0, judge_s=0.5, inputs_s=0.125)
    assert summed([None]) is None


def test_the_signed_statement_leaves_timings_out(sample: Any) -> None:
    document = sample.results()
    for op in document["ops"]:
        op["timings"] = {"cases": 3, "op_s": 1.5, "judge_s": 0.25}
    predicate = build(document)["predicate"]
    assert "op_s" not in json.dumps(predicate)
    plain = sample.results()
    assert build(plain)["predicate"]["results"] == predicate["results"]


@pytest.mark.slow
def test_every_run_records_its_split_and_profile_prints_it(tmp_path: Path) -> None:
    config = EXAMPLES / "quickstart" / "gpuemu.toml"
    done = run_cli(["run", "--config", str(config), "--out", str(tmp_path), "--op", "rmsnorm", "--profile"])
    assert done.code == 0, done.stderr
    op = json.loads((tmp_path / "results.json").read_text())["ops"][0]
    timings = OpTimings(**op["timings"])
    assert timings.cases == op["cases_total"] == 24
    seconds = timings.seconds()
    assert all(value >= 0.0 for value in seconds.values())
    # both sides generate inputs; the op, its reference and the judge each ran for every case
    assert min(seconds["inputs"], seconds["op"], seconds["reference"], seconds["judge"]) > 0.0
    header = next(line for line in done.stderr.splitlines() if line.startswith("op "))
    assert header.split()[2:11] == [
        "start", "load", "inputs", "triton", "op", "ref", "judge", "transport", "explain"
    ]  # fmt: skip
    assert any(line.startswith("rmsnorm ") and " 24 " in line for line in done.stderr.splitlines())
    assert len(PHASES) == 9
    assert seconds["explain"] == 0.0  # a passing op has no failure to explain
    # Without --profile nothing is printed, and the document still has the split.
    quiet = run_cli(["run", "--config", str(config), "--out", str(tmp_path / "q"), "--op", "gelu"])
    assert "transport" not in quiet.stderr
    assert json.loads((tmp_path / "q" / "results.json").read_text())["ops"][0]["timings"]["cases"] == 24


@pytest.mark.slow
def test_a_triton_run_charges_tape_making_to_launch_preparation(tmp_path: Path) -> None:
    config = EXAMPLES / "triton" / "gpuemu.toml"
    done = subprocess.run(
        [sys.executable, "-m", "gpuemu_ci", "run", "--config", str(config), "--out", str(tmp_path), "--no-lint",
         "--op", "rmsnorm", "--iterations", "4"],
        cwd=REPO, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    op = json.loads((tmp_path / "results.json").read_text())["ops"][0]
    assert op["timings"]["triton_prepare_s"] > 0.0  # the first launch of each kernel makes its tape
