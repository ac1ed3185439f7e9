"""Issue 14, item 6: case deadlines run on the parent's own clock. An op that overwrites every piece of shared
memory its process can reach (the status page, the output arena) and then hangs is still killed at its
timeout; an op that forges the worker's "imports done" message to restart its timer is refused."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.hostile.support_hostile import gpuemu, op_table, write_project

# Every test here takes seconds (whole runs, real processes): the fast tier (-m "not slow") leaves them out.
pytestmark = pytest.mark.slow

OPS = """
import ctypes, gc, os, struct, sys, time
import msgspec

def ok(x):
    return x.copy()

def ref(x):
    return x

def _shared_mappings():
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and ("memfd:" in line or "/dev/shm" in line) and "w" in fields[1]:
                start, end = (int(v, 16) for v in fields[0].split("-"))
                yield start, end

def scribble_then_hang(x):
    hit = 0
    for start, end in _shared_mappings():
        ctypes.memset(start, 0xFF, end - start)
        hit += 1
    print(f"overwrote {hit} shared mappings", flush=True)
    time.sleep(600)

def forge_ready_then_hang(x):
    worker = next(o for o in gc.get_objects() if type(o).__name__ == "Worker" and hasattr(o, "current"))
    payload = msgspec.msgpack.encode({"type": "Ready", "task": worker.current})
    for _ in range(50):
        os.write(int(sys.argv[1]), struct.pack("<Q", len(payload)) + payload)
        time.sleep(0.1)
    time.sleep(600)
"""


def test_an_op_that_overwrites_shared_memory_and_hangs_still_times_out(tmp_path: Path) -> None:
    tables = [op_table("scribbler", "ops:scribble_then_hang"), op_table("fine", "ops:ok")]
    config = write_project(tmp_path, OPS, tables, iterations=2, timeout=1)
    started = time.monotonic()
    done = gpuemu(config, "--out", str(tmp_path / "out"), "--jobs", "2", timeout=120)
    assert time.monotonic() - started < 60  # two 1 s timeouts and start-up, not a hang
    assert done.returncode == 1, done.stderr
    ops = {op["name"]: op for op in json.loads((tmp_path / "out" / "results.json").read_text())["ops"]}
    assert ops["fine"]["status"] == "passed"
    failures = ops["scribbler"]["failures"]
    assert len(failures) == 2 and all(f["kind"] == "timeout" for f in failures)
    assert all("timeout of 1 s" in f["message"] for f in failures)
    assert "overwrote 2 shared mappings" in (failures[0]["stderr_tail"] or "")  # its status page and arena


def test_a_forged_ready_message_cannot_restart_the_timer(tmp_path: Path) -> None:
    config = write_project(
        tmp_path, OPS, [op_table("forger", "ops:forge_ready_then_hang")], iterations=1, timeout=1
    )
    started = time.monotonic()
    done = gpuemu(config, "--out", str(tmp_path / "out"), timeout=120)
    assert time.monotonic() - started < 30
    assert done.returncode == 1, done.stderr
    (failure,) = json.loads((tmp_path / "out" / "results.json").read_text())["ops"][0]["failures"]
    assert failure["kind"] == "crashed" and "does not parse" in failure["message"]
