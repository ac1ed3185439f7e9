"""Issue 14, item 4: every way user code can end a process (sys.exit(0), KeyboardInterrupt, os._exit(0)) in an
op, its reference or a hook ends as a recorded failure or a non-zero exit, never as exit 0 without results.
Hooks run in the worker processes with the rest of the user code, never in the gate's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile.support_hostile import environment, gpuemu, op_table, pids_in, write_project

# Every test here takes seconds (whole runs, real processes): the fast tier (-m "not slow") leaves them out.
pytestmark = pytest.mark.slow

OPS = """
import os, sys
import numpy as np

def ok(x):
    return x.copy()

def ref(x):
    return x

def op_exit0(x):
    sys.exit(0)

def op_interrupt(x):
    raise KeyboardInterrupt

def op_hard_exit0(x):
    os._exit(0)

def ref_exit0(x):
    sys.exit(0)

def hook_exit0(rng, dims, dtype, kwargs):
    sys.exit(0)

def hook_interrupt(rng, dims, dtype, kwargs):
    raise KeyboardInterrupt

def hook_hard_exit0(rng, dims, dtype, kwargs):
    os._exit(0)

def hook_records_its_pid(rng, dims, dtype, kwargs):
    with open(os.environ["HOOK_PIDS"], "a") as f:
        f.write(str(os.getpid()) + chr(10))
    return {"x": np.ones(dims["N"], np.float32)}

def scale_exit0(inputs, reference, dims, kwargs):
    sys.exit(0)

def naive_exit0(x):
    sys.exit(0)
"""

CASES = [
    # (name, op, extra toml, expected exit code, expected op status, words in the results)
    ("op_exit0", "ops:op_exit0", "", 1, "failed", "SystemExit"),
    ("op_interrupt", "ops:op_interrupt", "", 1, "failed", "KeyboardInterrupt"),
    ("op_hard_exit0", "ops:op_hard_exit0", "", 1, "failed", "exited with code 0"),
    ("ref_exit0", "ops:ok", "", 3, "error", "SystemExit"),
    ("hook_exit0", "ops:ok", 'inputs = "ops:hook_exit0"', 3, "error", "SystemExit"),
    ("hook_interrupt", "ops:ok", 'inputs = "ops:hook_interrupt"', 3, "error", "KeyboardInterrupt"),
    ("hook_hard_exit0", "ops:ok", 'inputs = "ops:hook_hard_exit0"', 3, "error", "exited with code 0"),
    ("scale_exit0", "ops:ok", 'error_scale = "ops:scale_exit0"', 3, "error", "SystemExit"),
    ("naive_exit0", "ops:ok", 'naive = "ops:naive_exit0"', 3, "error", "SystemExit"),
]


@pytest.mark.parametrize(("name", "op", "extra", "code", "status", "words"), CASES, ids=[c[0] for c in CASES])
def test_user_code_that_ends_its_process_is_recorded_never_a_silent_pass(
    tmp_path: Path, name: str, op: str, extra: str, code: int, status: str, words: str
) -> None:
    reference = "ops:ref_exit0" if name == "ref_exit0" else "ops:ref"
    table = op_table(name, op, reference, extra)
    if name == "scale_exit0":
        table = table.replace('family = "elementwise"', 'family = "custom"')
    config = write_project(tmp_path, OPS, [table], iterations=2)
    done = gpuemu(config, "--out", str(tmp_path / "out"))
    assert done.returncode == code, done.stderr
    document = json.loads((tmp_path / "out" / "results.json").read_text())
    (result,) = document["ops"]
    assert result["status"] == status and document["verdict"] != "passed"
    recorded = json.dumps(result)
    assert words in recorded, recorded[:2000]


def test_hooks_run_in_the_workers_never_in_the_gates_process(tmp_path: Path) -> None:
    pids = tmp_path / "hook.pids"
    config = write_project(
        tmp_path, OPS, [op_table("hooked", "ops:ok", extra='inputs = "ops:hook_records_its_pid"')]
    )
    gate = subprocess.Popen(
        [sys.executable, "-m", "gpuemu_ci", "run", "--config", str(config), "--out", str(tmp_path / "o"), "--no-lint"],
        cwd=tmp_path, env=environment(tmp_path, HOOK_PIDS=str(pids)), stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _, err = gate.communicate(timeout=300)
    finally:
        if gate.poll() is None:
            gate.kill()
            gate.wait()
    assert gate.returncode == 0, err
    ran_in = set(pids_in(pids))
    assert ran_in and gate.pid not in ran_in  # the op's and the judge's processes, both generate the inputs
    assert len(ran_in) >= 2


def test_a_module_that_exits_while_importing_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(0)\n")
    config = write_project(tmp_path, OPS, [op_table("importer", "exits_on_import:f")], iterations=2)
    done = gpuemu(config, "--out", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr
    document = json.loads((tmp_path / "out" / "results.json").read_text())
    assert document["ops"][0]["import_error"] and "SystemExit" in document["ops"][0]["message"]
