"""TensorFlow as a framework: the op receives `tf.Tensor`s and returns one, judged like any other op. The
tests that need TensorFlow skip without it (`pip install 'gpuemu-ci[tensorflow]'`); without it, a TensorFlow
op is a clear error naming the extra."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CONFIG = """
[project]
name = "tf"
framework = "tensorflow"

[validation]
dtypes = ["float32", "bfloat16"]

[[ops]]
name = "softmax"
module = "tf_ops:{function}"
reference = "tf_ops:softmax_reference"
family = "softmax"
flush_to_zero = true  # TensorFlow's CPU kernels flush subnormals
[ops.dims]
R = [3, 17]
C = [5, 64]
[ops.inputs]
x = ["R", "C"]
"""

OPS = """
import numpy as np

def softmax(x):
    import tensorflow as tf
    assert isinstance(x, tf.Tensor), type(x)
    return tf.nn.softmax(x, axis=-1)

def softmax_without_max(x):
    import tensorflow as tf
    e = tf.exp(x)  # overflows on large rows: the classic missing max subtraction
    return e / tf.reduce_sum(e, axis=-1, keepdims=True)

def softmax_reference(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
"""

HAS_TF = importlib.util.find_spec("tensorflow") is not None


def project(make_project, function: str) -> Path:
    path: Path = make_project(CONFIG.format(function=function), {"tf_ops.py": OPS})
    return path


@pytest.mark.slow
@pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed (pip install 'gpuemu-ci[tensorflow]')")
@pytest.mark.parametrize(("function", "code"), [("softmax", 0), ("softmax_without_max", 1)])
def test_tensorflow_ops_are_judged(cli, make_project, tmp_path: Path, function: str, code: int) -> None:
    config = project(make_project, function)
    result = cli("run", "--config", config, "--out", tmp_path / "out", "--no-lint")
    assert result.code == code, result.stderr
    (op,) = json.loads((tmp_path / "out" / "results.json").read_text())["ops"]
    assert op["cases_total"] == 24 and op["cases_errored"] == 0


@pytest.mark.skipif(HAS_TF, reason="checks the message shown when TensorFlow is missing")
def test_without_tensorflow_the_error_names_the_extra(cli, make_project, tmp_path: Path) -> None:
    config = project(make_project, "softmax")
    result = cli("run", "--config", config, "--out", tmp_path / "out", "--no-lint")
    assert result.code == 2, result.stderr
    assert "gpuemu-ci[tensorflow]" in result.stderr and "tensorflow-cpu" in result.stderr
