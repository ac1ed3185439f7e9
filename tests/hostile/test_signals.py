"""Issue 14, item 7: SIGINT or SIGTERM stops the gate within seconds; it writes the cases judged so far, marked
cut short, exits 130 or 143, and leaves no process and no temporary file behind."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.hostile.support_hostile import environment, op_table, pids_in, wait_until_dead, write_project

# Every test here takes seconds (whole runs, real processes): the fast tier (-m "not slow") leaves them out.
pytestmark = pytest.mark.slow

OPS = """
import os, time

def _record():
    with open(os.environ["CALL_PIDS"], "a") as f:
        f.write(str(os.getpid()) + chr(10))

def slow(x):
    _record()
    time.sleep(0.3)
    return x.copy()

def ref(x):
    _record()
    return x
"""


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_gate_within_seconds_keeping_what_was_judged(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    pids, temp = tmp_path / "call.pids", tmp_path / "tmp"
    temp.mkdir()
    config = write_project(tmp_path, OPS, [op_table("slow", "ops:slow")], iterations=100)
    env = environment(tmp_path, CALL_PIDS=str(pids), TMPDIR=str(temp))
    gate = subprocess.Popen(
        [sys.executable, "-m", "gpuemu_ci", "run", "--config", str(config), "--out", str(tmp_path / "out"),
         "--jobs", "2", "--no-lint"],
        cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while len(pids_in(pids)) < 8 and time.monotonic() < deadline:  # some cases judged, others running
            assert gate.poll() is None
            time.sleep(0.05)
        gate.send_signal(sig)
        sent = time.monotonic()
        _, err = gate.communicate(timeout=60)
    finally:
        if gate.poll() is None:  # a failed test leaves nothing running either
            gate.kill()
            gate.wait()
    assert time.monotonic() - sent < 10, "the gate did not stop within seconds"
    assert gate.returncode == code, err
    assert f"interrupted by {sig.name}" in err and "Traceback" not in err
    document = json.loads((tmp_path / "out" / "results.json").read_text())
    assert document["cut_short"] and document["verdict"] == "incomplete"
    assert any(f"interrupted by {sig.name}" in note for note in document["notes"])
    (op,) = document["ops"]
    assert 0 < op["cases_total"] < 100 and op["cases_passed"] == op["cases_total"]
    workers = sorted(set(pids_in(pids)))
    assert len(workers) >= 2 and wait_until_dead(workers) == []
    assert list(temp.iterdir()) == []
