"""Issue 14, item 10: a verdict never depends on which op ran before in the same worker. An op (and its
reference) that turns floating-point errors into exceptions, arms a signal timer, changes the rounding mode,
edits the environment, changes directory or turns warnings into errors leaves nothing behind for the next."""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

import pytest

from tests.hostile.support_hostile import gpuemu, op_table, write_project

OPS = """
import ctypes, ctypes.util, os, platform, signal, warnings
import numpy as np

FE_UPWARD = {"x86_64": 0x800, "AMD64": 0x800, "aarch64": 0x400000}.get(platform.machine())

def _pollute():
    np.seterr(all="raise")
    warnings.simplefilter("error")
    os.environ["GPUEMU_POLLUTED"] = "1"
    os.chdir("/")
    signal.setitimer(signal.ITIMER_REAL, 0.5)  # SIGALRM's default action ends the process
    if FE_UPWARD is not None:
        ctypes.CDLL(ctypes.util.find_library("m")).fesetround(FE_UPWARD)

def polluter(x):
    _pollute()
    return x.copy()

def ref_polluter(x):
    _pollute()
    return x

def victim(x):
    assert os.path.exists("ops.py"), "the working directory changed"
    assert "GPUEMU_POLLUTED" not in os.environ, "the environment changed"
    np.exp(x.astype(np.float32) * np.float32(100))  # overflows to inf: a warning, not an error
    return (x / np.float32(3)).astype(x.dtype)

def ref_victim(x):
    return x / 3
"""


def _victim(document: dict[str, Any]) -> dict[str, Any]:
    """The victim op's result, less the time its calls took (measured: every run's own)."""
    op = next(op for op in document["ops"] if op["name"] == "victim")
    op.pop("timings", None)
    for row in op["dtypes"]:
        row.pop("duration_s")
    result: dict[str, Any] = op
    return result


@pytest.mark.slow
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_polluting_op_does_not_change_the_next_ops_verdict(tmp_path: Path, jobs: str) -> None:
    tables = [
        op_table("polluter", "ops:polluter", "ops:ref_polluter"),
        op_table("victim", "ops:victim", "ops:ref_victim"),
    ]
    config = write_project(tmp_path, OPS, tables, iterations=16)
    alone = gpuemu(config, "--op", "victim", "--out", str(tmp_path / "alone"), "--jobs", jobs)
    after = gpuemu(config, "--out", str(tmp_path / "after"), "--jobs", jobs)
    assert alone.returncode == 0, alone.stderr
    assert after.returncode == 0, after.stderr  # the polluter's own cases pass, and nothing was killed
    first = _victim(json.loads((tmp_path / "alone" / "results.json").read_text()))
    second = _victim(json.loads((tmp_path / "after" / "results.json").read_text()))
    assert first["status"] == "passed" and first == second  # same verdicts, same worst errors


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64", "aarch64"), reason="rounding-mode constant")
def test_the_rounding_mode_would_show_in_the_figures(tmp_path: Path) -> None:
    """The check above means something: the victim's figures do change under another rounding mode."""
    import numpy as np

    x = np.float32(np.arange(1, 1000)) / np.float32(7)
    import ctypes
    import ctypes.util

    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    upward = {"x86_64": 0x800, "AMD64": 0x800, "aarch64": 0x400000}[platform.machine()]
    nearest = (x / np.float32(3)).tobytes()
    libm.fesetround(upward)
    try:
        rounded_up = (x / np.float32(3)).tobytes()
    finally:
        libm.fesetround(0)
    assert rounded_up != nearest
