"""Issue 14, item 5: a reply from a worker that does not parse into what was asked (garbage, a frame that never
ends, a well-formed message with a string size or an object dtype, outputs outside the arena, a reply for
another case) is that case's `crashed` failure; the suite goes on and results.json is written.

The ops here write into the worker's own socket, as a hostile or corrupted op can."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.hostile.support_hostile import gpuemu, op_table, write_project

# Every test here takes seconds (whole runs, real processes): the fast tier (-m "not slow") leaves them out.
pytestmark = pytest.mark.slow

OPS = """
import gc, os, struct, sys
import msgspec

def _socket():
    return int(sys.argv[1])  # the worker's protocol socket: python -m gpuemu_ci.backends.worker FD ...

def _send(payload):
    os.write(_socket(), struct.pack("<Q", len(payload)) + payload)

def _task():
    worker = next(o for o in gc.get_objects() if type(o).__name__ == "Worker" and hasattr(o, "current"))
    return worker.current

def _done(outputs, task=None):
    return msgspec.msgpack.encode({
        "type": "OpDone", "task": _task() if task is None else task,
        "op": {"status": "ok", "message": "", "duration_s": 0.0, "outputs": outputs},
    })

def ok(x):
    return x.copy()

def ref(x):
    return x

def garbage(x):
    _send(b"\\x93\\xff this is not a reply")
    return x.copy()

def endless_frame(x):
    os.write(_socket(), struct.pack("<Q", 1 << 40))
    return x.copy()

def string_size(x):
    _send(_done([{"dtype": "float32", "shape": [4], "nbytes": "16", "offset": 0}]))
    return x.copy()

def object_dtype(x):
    _send(_done([{"dtype": "object", "shape": [2], "nbytes": 16, "offset": 0}]))
    return x.copy()

def outside_the_arena(x):
    _send(_done([{"dtype": "float32", "shape": [4], "nbytes": 16, "offset": 1 << 40}]))
    return x.copy()

def another_case(x):
    _send(_done([], task=_task() + 1000))
    return x.copy()
"""

HOSTILE = {
    "garbage": "does not parse",
    "endless_frame": "a reply of 1,099,511,627,776 bytes",
    "string_size": "does not parse",
    "object_dtype": "cannot cross processes",
    "outside_the_arena": "lies outside the arena",
    "another_case": "for another case",
}


def test_malformed_replies_are_crashes_of_their_case_and_the_suite_goes_on(tmp_path: Path) -> None:
    tables = [op_table(name, f"ops:{name}") for name in ("ok", *HOSTILE, "ok_after")]
    tables[-1] = tables[-1].replace('op = "ops:ok_after"', 'op = "ops:ok"')
    config = write_project(tmp_path, OPS, tables, iterations=3)
    done = gpuemu(config, "--out", str(tmp_path / "out"), "--jobs", "2")
    assert done.returncode == 1, done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    ops = {op["name"]: op for op in json.loads((tmp_path / "out" / "results.json").read_text())["ops"]}
    assert ops["ok"]["status"] == ops["ok_after"]["status"] == "passed"
    for name, words in HOSTILE.items():
        op = ops[name]
        assert op["status"] == "failed" and op["cases_failed"] == op["cases_total"] == 3, (name, op)
        for failure in op["failures"]:
            assert failure["kind"] == "crashed", (name, failure)
            assert words in failure["message"] and failure["case_seed"] > 0, (name, failure["message"])
