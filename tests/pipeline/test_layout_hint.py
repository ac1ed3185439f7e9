"""A kernel that reads its weight as if it were contiguous fails only where the fuzzer gave the weight another
layout: the failure then says so, and how to declare the weight contiguous when the op never gets it strided
(issue #51: three norm kernels failed on a non-contiguous weight with no hint)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from gpuemu_ci.render.links import Links
from gpuemu_ci.render.markdown import render_comment
from gpuemu_ci.results.model import Results
from tests.support_cli import CliResult

OPS = """
import numpy as np

def scale_rows(x, weight):
    # the weight read straight from its buffer, as a kernel taking a bare pointer would: its strides ignored
    flat = np.lib.stride_tricks.as_strided(weight, shape=weight.shape, strides=(weight.itemsize,))
    return (x.astype(np.float32) * flat.astype(np.float32)).astype(x.dtype)

def scale_rows_ref(x, weight):
    return x.astype(np.float64) * weight.astype(np.float64)
"""

CONFIG = """
[validation]
dtypes = ["float32"]

[ci]
quick_iterations = 16

[[ops]]
name = "scale_rows"
op = "m.ops:scale_rows"
reference = "m.ops:scale_rows_ref"
family = "elementwise"
[ops.dims]
M = [4, 16]
N = [32, 100]
[ops.inputs]
x = ["M", "N"]
weight = {weight}
"""


def _run(
    make_project: Callable[..., Path], cli: Callable[..., CliResult], weight: str
) -> tuple[CliResult, dict]:
    config = make_project(CONFIG.format(weight=weight), {"m/__init__.py": "", "m/ops.py": OPS})
    result = cli("run", "--config", config, "--out", config.parent / "out", cwd=config.parent)
    return result, json.loads((config.parent / "out" / "results.json").read_text())


@pytest.mark.slow
def test_a_failure_only_with_a_strided_weight_says_how_to_declare_it_contiguous(make_project, cli):
    result, results = _run(make_project, cli, '["N"]')
    assert result.code == 1
    (op,) = results["ops"]
    assert op["cases_passed"] > 0 and all(f["layouts"]["weight"] != "contiguous" for f in op["failures"])
    assert "hint: every failing case had `weight` (" in result.stderr
    assert 'weight = { dims = [...], layouts = ["contiguous"] }' in result.stderr
    # ... and the PR comment says it too
    comment = render_comment(
        msgspec.convert(results, type=Results, strict=False), Links(None, None), job="gate"
    )
    assert ("[!TIP]" in comment and "scale\\_rows" in comment) or "scale_rows" in comment
    assert "every failing case had" in comment


@pytest.mark.slow
def test_declared_contiguous_the_same_kernel_passes(make_project, cli):
    result, _ = _run(make_project, cli, '{ dims = ["N"], layouts = ["contiguous"] }')
    assert result.code == 0, result.stderr
    assert "hint:" not in result.stderr
