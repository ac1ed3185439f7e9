"""gpuemu_ci.check(): the client-side workflow from a user's own test code."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import gpuemu_ci
from gpuemu_ci.api import OpCheckFailed
from tests.conftest import EXAMPLES

QUICKSTART = EXAMPLES / "quickstart" / "gpuemu.toml"


@pytest.fixture
def quickstart_kernels(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES / "quickstart"))
    from kernels.softmax import softmax

    yield softmax
    for name in [m for m in sys.modules if m == "kernels" or m.startswith("kernels.")]:
        del sys.modules[name]


def test_a_correct_lambda_passes_in_process(quickstart_kernels, tmp_path):
    result = gpuemu_ci.check(
        "softmax", lambda x: quickstart_kernels(x), config=QUICKSTART, out_dir=tmp_path, iterations=4
    )
    assert result.status.value == "passed" and result.cases_total == 8  # 4 cases x 2 quick dtypes


def test_a_buggy_callable_raises_with_replay_seeds(quickstart_kernels, tmp_path):
    @np.errstate(all="ignore")
    def softmax_without_max_subtraction(x):  # overflows for large inputs
        e = np.exp(x.astype(np.float32))
        return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype)

    with pytest.raises(OpCheckFailed) as info:
        gpuemu_ci.check("softmax", softmax_without_max_subtraction, config=QUICKSTART, out_dir=tmp_path)
    text = str(info.value)
    assert "softmax failed" in text and "replay: gpuemu-ci replay" in text and "--seed" in text
    assert isinstance(info.value, AssertionError)  # pytest reports it as a test failure
    assert info.value.result.cases_failed > 0


def test_an_importable_function_runs_in_an_isolated_worker(make_project, tmp_path, monkeypatch):
    config = make_project(
        """
        [ci]
        quick_iterations = 3
        [[ops]]
        name = "double"
        op = "userops:double"
        reference = "userops:double_ref"
        family = "elementwise"
        [ops.dims]
        N = [8, 32]
        [ops.inputs]
        x = ["N"]
    """,
        {
            "userops.py": """
        import os
        import numpy as np
        def double(x):
            return (x * 2).astype(x.dtype)
        def double_ref(x):
            return x * 2
        def crashes(x):
            os._exit(3)
    """
        },
    )
    monkeypatch.syspath_prepend(str(config.parent))
    import userops

    assert gpuemu_ci.check("double", userops.double, config=config, out_dir=tmp_path).status.value == "passed"
    # Isolation: a crash in the worker is a recorded failure, not the end of the test process.
    with pytest.raises(OpCheckFailed) as info:
        gpuemu_ci.check("double", userops.crashes, config=config, out_dir=tmp_path)
    assert info.value.result.failures[0].kind == "crashed"
    del sys.modules["userops"]


def test_an_unknown_op_is_a_clear_error():
    from gpuemu_ci.errors import ConfigError

    with pytest.raises(ConfigError, match="is not an op"):
        gpuemu_ci.check("nope", lambda x: x, config=QUICKSTART)
