"""The op's worker and the judge's build the same inputs for every case, whatever their hash seeds and however
often workers die (issue 25); when they cannot (a hook that draws its own randomness), each such case is its
op's error, never a verdict, and the run goes on (issue 45). A SIGKILL says "out of memory" only where the
kernel recorded an OOM kill."""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from gpuemu_ci.backends import WorkerPool
from gpuemu_ci.backends.interface import CaseSpec
from gpuemu_ci.backends.loading import load_callable
from gpuemu_ci.backends.oom import OomRecord
from gpuemu_ci.backends.process import exit_words
from gpuemu_ci.config.load import load_config
from gpuemu_ci.fuzz.inputs import case_inputs, inputs_digest
from gpuemu_ci.pipeline.session import Session
from gpuemu_ci.pipeline.settings import RunOptions
from tests.backends.support_cases import first_case, op_task
from tests.fuzz.case_vectors import VECTORS
from tests.support_cli import run_cli

DIGEST = re.compile(r"\b[0-9a-f]{32}\b")

POOL_OPS = """
import os, signal
import numpy as np

def pool(x, kernel_size, stride):
    with open("calls", "a+") as f:  # every op call, in any worker
        f.write(".")
        f.seek(0)
        calls = len(f.read())
    if calls in (5, 13, 21):
        os.kill(os.getpid(), signal.SIGKILL)  # a worker dies mid-suite and is replaced
    return x.copy()

def pool_ref(x, kernel_size, stride):
    return x
"""


@pytest.mark.slow
def test_op_and_judge_build_the_same_inputs_in_fresh_workers_that_die(tmp_path, monkeypatch):
    """Workers started as fresh interpreters each get their own random hash seed (none is set): the issue's
    config, whose capped dims once shrank in hash order, builds the same inputs on both sides of every case,
    and the same as this process, also after workers were killed and replaced mid-suite."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    (tmp_path / "gpuemu.toml").write_text((VECTORS / "pool.toml").read_text())
    (tmp_path / "ops.py").write_text(POOL_OPS)
    config = load_config(tmp_path / "gpuemu.toml")
    op = config.op("pool")
    with Session(config, RunOptions(out_dir=tmp_path / "out", jobs=2)) as session:
        refs = session.plan(op, op.dtypes, 16)
        # Each worker builds the inputs itself (as for hooks, snapshots and large cases), not the pool once.
        pool = WorkerPool(2, tmp_path, gpu=None, fork_workers=False, ship_inputs=False)
        with pool:
            task = session.task(op)
            futures = [(ref, pool.submit(task, CaseSpec(ref.seed, ref.index))) for ref in refs]
            reports = [(ref, future.result()) for ref, future in futures]
    crashed = [r for _, r in reports if r.kind == "crashed"]
    assert len(crashed) == 3 and all("killed by SIGKILL" in r.message for r in crashed)
    assert pool.worker_starts > 3  # three processes to begin with, then one per kill
    for ref, report in reports:
        assert report.outcome in ("passed", "failed"), report.message
        mine = inputs_digest(case_inputs(op, ref.seed, config.root, load_callable))
        assert report.inputs_digest == mine, ref.case_id


NOISY = """
[[ops]]
name = "noisy"
op = "noisy_ops:double"
reference = "noisy_ops:double"
family = "elementwise"
dtypes = ["float32"]
inputs = "noisy_ops:make_inputs"
[ops.dims]
N = [64]
"""

NOISY_OPS = """
import os
import numpy as np

def make_inputs(rng, dims, dtype, kwargs):
    # {how}
    return {{"x": {values}.astype(dtype)}}

def double(x):
    return x * 2
"""


def _project(root: Path, how: str, values: str) -> Path:
    (root / "noisy_ops.py").write_text(textwrap.dedent(NOISY_OPS.format(how=how, values=values)))
    config = root / "gpuemu.toml"
    config.write_text(NOISY)
    return config


SOUND = """
[[ops]]
name = "sound"
op = "noisy_ops:double"
reference = "noisy_ops:double"
family = "elementwise"
dtypes = ["float32"]
[ops.dims]
N = [64]
[ops.inputs]
x = ["N"]
"""


@pytest.mark.slow
def test_a_hook_that_draws_its_own_randomness_fails_its_op_and_the_run_goes_on(tmp_path):
    """Issue 45, item 5: each case of the noisy op is that op's error, naming the case and both digests; the
    other op is judged and the whole document is written (the old code stopped the run: exit 3, no
    results.json)."""
    config = _project(
        tmp_path, "ignores the case's rng", 'np.random.default_rng().standard_normal(dims["N"])'
    )
    config.write_text(config.read_text() + SOUND)
    result = run_cli(["run", "--config", config, "--out", tmp_path / "out"])
    assert result.code == 3, result.stderr  # an op could not be judged: an error, never a pass
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    document = json.loads((tmp_path / "out" / "results.json").read_text())
    noisy, sound = document["ops"]
    assert sound["status"] == "passed" and sound["cases_passed"] == sound["cases_total"] > 0
    assert noisy["status"] == "error" and noisy["cases_passed"] == 0
    assert noisy["cases_errored"] == noisy["cases_total"] > 0
    assert "built different inputs from the same seed" in noisy["message"]
    assert "own randomness" in noisy["message"]
    failure = noisy["failures"][0]
    assert failure["kind"] == "inputs_differ" and failure["errored"]
    assert failure["case_id"] in failure["message"] and len(set(DIGEST.findall(failure["message"]))) == 2
    assert "mismatch" not in json.dumps(noisy)  # never a verdict about the op's numbers
    assert document["verdict"] == "error"


@pytest.mark.slow
def test_replay_that_builds_other_inputs_says_so_instead_of_passes_now(tmp_path):
    """The hook's inputs follow an environment variable: the same in both workers of a run (so the run is
    judged), but the replay runs with another value and cannot rebuild the recorded case."""
    config = _project(
        tmp_path,
        "reads the environment",
        'np.full(dims["N"], float(os.environ["NOISE"])) + (rng.u64_array(dims["N"]) % 5)',
    )
    (tmp_path / "noisy_ops.py").write_text(
        (tmp_path / "noisy_ops.py").read_text().replace("return x * 2", "return x * 2 + (x > 3)")
    )
    out = tmp_path / "out"
    run = run_cli(["run", "--config", config, "--out", out], env={"NOISE": "1"})
    assert run.code == 1, run.stderr
    document = json.loads((out / "results.json").read_text())
    failure = document["ops"][0]["failures"][0]
    assert DIGEST.fullmatch(failure["inputs_digest"])
    again = run_cli(
        ["replay", out / "results.json", "--config", config, "--out", tmp_path / "r1"], env={"NOISE": "1"}
    )
    assert again.code == 1 and "REPRODUCED" in again.stderr
    other = run_cli(
        ["replay", out / "results.json", "--config", config, "--out", tmp_path / "r2"], env={"NOISE": "-50"}
    )
    assert other.code == 3, other.stderr
    assert "BUILT OTHER INPUTS" in other.stderr and failure["inputs_digest"] in other.stderr
    assert "DID NOT REPRODUCE" not in other.stderr and "passes now" not in other.stderr


def test_a_worker_killed_by_another_process_is_not_called_out_of_memory(pool, user_root):
    pid_file = user_root / "killme.pid"
    pid_file.unlink(missing_ok=True)
    task = op_task(user_root, "backend_ops:wait_to_be_killed", "backend_ops:ref_add")
    future = pool.submit(task, first_case(task))
    deadline = time.monotonic() + 120
    while not pid_file.exists():
        assert time.monotonic() < deadline, "the op never started"
        time.sleep(0.05)
    subprocess.run(["kill", "-KILL", pid_file.read_text()], check=True)  # another process sends it
    report = future.result()
    assert report.outcome == "failed" and report.kind == "crashed"
    assert "was killed by SIGKILL" in report.message and "in the op call" in report.message
    assert "out-of-memory killer" not in report.message
    if OomRecord.now().counts and OomRecord.now().killed_since(OomRecord.now()) is False:
        assert "the kernel recorded no OOM kill" in report.message


def test_a_sigkill_mentions_memory_only_on_the_kernels_record():
    assert exit_words(-9, oom_killed=True).startswith(
        "was killed by SIGKILL (the kernel's out-of-memory killer"
    )
    assert "out-of-memory" not in exit_words(-9, oom_killed=None)
    assert "no OOM kill" in exit_words(-9, oom_killed=False)
    assert exit_words(-11, oom_killed=True) == "was killed by SIGSEGV"
    before = OomRecord((3, None, 7))
    assert OomRecord((3, 5, 8)).killed_since(before) is True
    assert OomRecord((3, 5, 7)).killed_since(before) is False
    assert OomRecord((None, None, None)).killed_since(before) is None


def test_a_case_the_ops_side_could_not_hold_is_skipped_by_the_judge_too(user_root, monkeypatch):
    """Each side reads the free memory when it builds the case: when the op's side found too little and the
    judge's enough a moment later, the case is skipped (never judged against an op that did not run)."""
    from gpuemu_ci.backends.judge_side import OpView, run_judge_side
    from gpuemu_ci.backends.op_side import run_op_side
    from gpuemu_ci.fuzz import case as case_mod

    task = op_task(user_root, "backend_ops:add", "backend_ops:ref_add")
    spec = first_case(task)
    readings = iter(["typical sizes: needs about 9.0 GiB, 1.0 GiB usable here", None])
    monkeypatch.setattr(case_mod, "memory_shortfall", lambda *args: next(readings))
    side = run_op_side(task, spec, contain=Exception)
    assert side.skipped and not side.inputs_digest
    view = OpView(
        side.op, side.rerun, side.inputs_modified, side.interpreter, (), side.inputs_digest, side.skipped
    )
    report, _ = run_judge_side(task, spec, view, contain=Exception)
    assert report.outcome == "skipped" and "1.0 GiB usable here" in report.message
