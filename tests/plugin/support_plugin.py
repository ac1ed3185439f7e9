"""A fresh project for the pytest plugin: gpuemu.toml with a NumPy softmax (float32 and float16) and an
elementwise scale, and a softmax that is either correct or forgets to subtract the row maximum (it overflows
on large inputs)."""

from __future__ import annotations

import importlib.metadata
import textwrap
from pathlib import Path

import pytest

CONFIG = """
[project]
name = "plugin-project"

[validation]
dtypes = ["float32", "float16"]
seed = 7

[ci]
quick_iterations = 6
thorough_iterations = 12
case_timeout = 60
# The thorough suite's large class (past 2^31 elements) does not fit a test machine: those cases are skipped,
# which fails a check unless allowed.
allow_skips = true

[[ops]]
name = "softmax"
op = "ops:softmax"
reference = "ops:softmax_ref"
family = "softmax"
[ops.dims]
M = [1, 4]
N = { min = 1, max = 256, typical = [16, 64] }
[ops.inputs]
x = ["M", "N"]

[[ops]]
name = "scale"
op = "ops:scale"
reference = "ops:scale_ref"
family = "elementwise"
dtypes = ["float32"]
[ops.dims]
N = { min = 1, max = 512, typical = [32] }
[ops.inputs]
x = ["N"]
"""

OPS = """
import numpy as np

BUGGY = False


@np.errstate(all="ignore")
def softmax(x):
    x32 = x.astype(np.float32)
    shifted = x32 if BUGGY else x32 - x32.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype)


def softmax_ref(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def scale(x):
    return (x.astype(np.float32) * np.float32(0.5)).astype(x.dtype)


def scale_ref(x):
    return x * 0.5
"""


def write_project(root: Path, *, buggy: bool = False) -> Path:
    (root / "gpuemu.toml").write_text(textwrap.dedent(CONFIG))
    set_buggy(root, buggy)
    return root / "gpuemu.toml"


def set_buggy(root: Path, buggy: bool) -> None:
    (root / "ops.py").write_text(textwrap.dedent(OPS).replace("BUGGY = False", f"BUGGY = {buggy}"))


def plugin_registered() -> bool:
    """Whether the installed distribution registers the plugin (`pip install -e .` does)."""
    return any(
        entry.name == "gpuemu" and entry.value == "gpuemu_ci.pytest_plugin"
        for entry in importlib.metadata.entry_points(group="pytest11")
    )


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """pytest in a subprocess in the project, the plugin loaded the way a user's pytest loads it: by its entry
    point (named explicitly only in a source checkout that was never installed)."""
    load = () if plugin_registered() else ("-p", "gpuemu_ci.pytest_plugin")
    return pytester.runpytest_subprocess(*load, *args)
