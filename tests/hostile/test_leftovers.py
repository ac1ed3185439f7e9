"""Issue 14, items 11 and 12: processes an op starts do not outlive the gate, whatever way it ends (a clean run
included: the worker's whole process group is killed); and an op that prints 50 MiB per case costs the gate a
bounded tail, never its memory or the disk."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.hostile.support_hostile import (
    environment,
    gpuemu,
    op_table,
    pids_in,
    wait_until_dead,
    write_project,
)

# Every test here takes seconds (whole runs, real processes): the fast tier (-m "not slow") leaves them out.
pytestmark = pytest.mark.slow

OPS = """
import os, subprocess, sys, time

def _record(*pids):
    with open(os.environ["SPAWNED_PIDS"], "a") as f:
        f.write("".join(f"{pid}" + chr(10) for pid in pids))

def spawner(x):
    child = subprocess.Popen(["sleep", "300"])
    forked = os.fork()
    if forked == 0:
        time.sleep(300)
        os._exit(0)
    _record(child.pid, forked)
    return x.copy()

def ref(x):
    return x

def chatty(x):
    line = "y" * (1 << 20)
    for _ in range(50):
        sys.stdout.write(line + chr(10))
    print("LAST LINE BEFORE THE ERROR", flush=True)
    raise RuntimeError("after 50 MiB of output")
"""


def test_processes_an_op_starts_die_with_the_gate_after_a_clean_run(tmp_path: Path) -> None:
    spawned = tmp_path / "spawned.pids"
    config = write_project(tmp_path, OPS, [op_table("spawner", "ops:spawner")], iterations=3)
    done = gpuemu(
        config, "--out", str(tmp_path / "out"), env=environment(tmp_path, SPAWNED_PIDS=str(spawned))
    )
    assert done.returncode == 0, done.stderr
    pids = pids_in(spawned)
    assert len(pids) == 6  # a subprocess and a fork per case
    assert wait_until_dead(pids) == []


def test_a_chatty_op_costs_a_bounded_tail(tmp_path: Path) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    config = write_project(tmp_path, OPS, [op_table("chatty", "ops:chatty")], iterations=8)
    gate = subprocess.Popen(
        [sys.executable, "-m", "gpuemu_ci", "run", "--config", str(config), "--out", str(tmp_path / "out"),
         "--no-lint"],
        cwd=tmp_path, env=environment(tmp_path, TMPDIR=str(temp)), stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    peak_kib = 0
    try:
        while gate.poll() is None:  # the gate's peak resident memory, while 400 MiB of output go by
            try:
                status = Path(f"/proc/{gate.pid}/status").read_text()
            except OSError:
                break
            # A process that has just exited is a zombie until reaped: its status has no memory lines.
            peaks = [int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM")]
            peak_kib = max([peak_kib, *peaks])
            time.sleep(0.05)
        _, err = gate.communicate(timeout=300)
    finally:
        if gate.poll() is None:
            gate.kill()
            gate.wait()
    assert gate.returncode == 1, err
    assert 0 < peak_kib < 250 * 1024, f"the gate's peak memory was {peak_kib // 1024} MiB"
    (op,) = json.loads((tmp_path / "out" / "results.json").read_text())["ops"]
    assert op["cases_failed"] == 8, op
    for failure in op["failures"]:
        tail = failure["stderr_tail"] or ""
        assert "LAST LINE BEFORE THE ERROR" in tail and len(tail) <= 4100, (failure["message"], tail[-300:])
    assert list(temp.iterdir()) == []
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["results.json", "snapshots"]
