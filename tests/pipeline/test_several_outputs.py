"""An op with several outputs: each is compared with the reference's output at the same position, in the dtype
`output_dtype` gives it (one for all, or a list with one per output), and a failure names the output."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support_cli import CliResult

OPS = """
import numpy as np

def softmax_lse(x):
    x32 = x.astype(np.float32)
    m = x32.max(axis=-1, keepdims=True)
    e = np.exp(x32 - m)
    s = e.sum(axis=-1, keepdims=True)
    return (e / s).astype(x.dtype), (m + np.log(s))[..., 0].astype(np.float32)

def softmax_lse_wrong_lse(x):
    y, lse = softmax_lse(x)
    return y, (lse + np.float32(0.5)).astype(np.float32)

def softmax_lse_ref(x):
    x64 = x.astype(np.float64)
    m = x64.max(axis=-1, keepdims=True)
    e = np.exp(x64 - m)
    s = e.sum(axis=-1, keepdims=True)
    return e / s, (m + np.log(s))[..., 0]
"""

CONFIG = """
[validation]
dtypes = ["float16"]

[ci]
quick_iterations = 6

[[ops]]
name = "softmax_lse"
op = "m.ops:{op}"
reference = "m.ops:softmax_lse_ref"
family = "softmax"
{output_dtype}
[ops.dims]
M = [4, 16]
N = [32, 100]
[ops.inputs]
x = ["M", "N"]
"""


def _run(
    make_project: Callable[..., Path], cli: Callable[..., CliResult], op: str, output_dtype: str
) -> tuple[CliResult, dict]:
    config = make_project(
        CONFIG.format(op=op, output_dtype=output_dtype), {"m/__init__.py": "", "m/ops.py": OPS}
    )
    result = cli("run", "--config", config, "--out", config.parent / "out", cwd=config.parent)
    results = json.loads((config.parent / "out" / "results.json").read_text())
    return result, results["ops"][0]


@pytest.mark.slow
def test_one_dtype_per_output_judges_an_output_and_its_float32_log_sum_exp(make_project, cli):
    result, op = _run(make_project, cli, "softmax_lse", 'output_dtype = ["float16", "float32"]')
    assert result.code == 0, result.stderr
    assert op["status"] == "passed" and op["cases_failed"] == 0


@pytest.mark.slow
def test_without_the_list_the_second_output_fails_on_its_dtype_with_the_fix_named(make_project, cli):
    result, op = _run(make_project, cli, "softmax_lse", "")
    assert result.code == 1
    message = op["failures"][0]["message"]
    assert message.startswith("output 1: dtype float32 != expected float16")
    assert "a list gives one dtype per output" in message


@pytest.mark.slow
def test_a_wrong_second_output_fails_naming_its_position(make_project, cli):
    result, op = _run(make_project, cli, "softmax_lse_wrong_lse", 'output_dtype = ["float16", "float32"]')
    assert result.code == 1
    assert op["failures"][0]["message"].startswith("output 1: ")


@pytest.mark.slow
def test_a_list_naming_more_outputs_than_the_op_returns_fails_clearly(make_project, cli):
    result, op = _run(make_project, cli, "softmax_lse", 'output_dtype = ["float16", "float32", "float32"]')
    assert result.code == 1
    assert "the op returned 2 outputs; `output_dtype` names 3" in op["failures"][0]["message"]


def test_an_unknown_dtype_in_the_list_is_a_config_error_naming_its_position(make_project, cli):
    config = make_project(
        CONFIG.format(op="softmax_lse", output_dtype='output_dtype = ["float16", "flaot32"]'),
        {"m/__init__.py": "", "m/ops.py": OPS},
    )
    result = cli("run", "--config", config, cwd=config.parent)
    assert result.code == 2
    assert "output_dtype[1]" in result.stderr and "Traceback" not in result.stderr
