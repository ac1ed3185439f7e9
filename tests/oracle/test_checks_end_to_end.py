"""Checks that need no tolerance, and the custom / baseline-relative rules, through real worker processes:
each with a kernel that violates it and one that does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuemu_ci.config.load import load_config
from gpuemu_ci.pipeline.gate import run_gate
from gpuemu_ci.pipeline.settings import RunOptions
from gpuemu_ci.results.codec import to_builtins

# Each test runs whole suites or processes: seconds each (the fast tier, -m "not slow", leaves them out).
pytestmark = pytest.mark.slow

KERNELS = """
import numpy as np
import ml_dtypes

def scale_ref(x):
    return x * 0.5

def scale(x):
    return (x.astype(np.float32) * np.float32(0.5)).astype(x.dtype)

def scale_in_place(x):
    x *= 0.5                      # writes into the caller's tensor
    return x.copy()

def scale_into(x, out):
    out[...] = (x.astype(np.float32) * np.float32(0.5)).astype(out.dtype)
    return out

def scale_into_partial(x, out):
    n = (out.shape[-1] // 32) * 32  # the tail block is never stored
    out[..., :n] = (x[..., :n].astype(np.float32) * np.float32(0.5)).astype(out.dtype)
    return out

def noisy(x):
    jitter = np.random.default_rng().integers(0, 2, size=x.shape).astype(np.float32) * np.float32(1e-7)
    return ((x.astype(np.float32) + jitter) * np.float32(0.5)).astype(x.dtype)

def gelu_ref(x):
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))

def _gelu32(x):
    v = x.astype(np.float32)
    inner = np.float32(0.7978845608028654) * (v + np.float32(0.044715) * v * v * v)
    return np.float32(0.5) * v * (np.float32(1) + np.tanh(inner))

def gelu_rne(x):
    return _gelu32(x).astype(ml_dtypes.bfloat16)

def gelu_truncating(x):
    bits = _gelu32(x).view(np.uint32) & np.uint32(0xFFFF0000)  # fp32 -> bf16 by dropping the low half
    return bits.view(np.float32).astype(ml_dtypes.bfloat16)

def sum_rows_ref(x):
    return x.sum(axis=-1)

def sum_rows(x):
    return x.astype(np.float32).sum(axis=-1, dtype=np.float32).astype(x.dtype)

def sum_rows_fp16_acc(x):
    acc = np.zeros(x.shape[:-1], np.float16)
    for j in range(x.shape[-1]):
        acc = (acc + x[..., j].astype(np.float16)).astype(np.float16)
    return acc.astype(x.dtype)

def sum_scale(inputs, reference, dims, kwargs):
    return np.abs(inputs["x"]).sum(axis=-1), dims["N"]

def sum_rows_skip_tail(x):  # a dropped partial tile: the last N % 32 elements never reach the sum
    n = (x.shape[-1] // 32) * 32
    return x[..., :n].astype(np.float32).sum(axis=-1, dtype=np.float32).astype(x.dtype)

def sum_rows_naive(x):  # the same-dtype implementation the baseline-relative rule measures against
    return np.add.reduce(x.astype(np.float16), axis=-1, dtype=np.float16).astype(x.dtype)
"""


def op(
    name: str,
    target: str,
    reference: str,
    extra: str = "",
    dims: str = "M = [4, 8]\nN = [64, 100]",
    dtypes: str = '["float32"]',
) -> str:
    return f"""
[[ops]]
name = "{name}"
op = "k:{target}"
reference = "k:{reference}"
dtypes = {dtypes}
{extra}
[ops.dims]
{dims}
[ops.inputs]
x = ["M", "N"]
"""


CONFIG = "[ci]\nquick_iterations = 16\n" + "".join(
    [
        op("clean", "scale", "scale_ref", 'family = "elementwise"'),
        op("mutates_input", "scale_in_place", "scale_ref", 'family = "elementwise"'),
        op("writes_out", "scale_into", "scale_ref", 'family = "elementwise"\nout_arg = "out"'),
        op(
            "leaves_tail_unwritten",
            "scale_into_partial",
            "scale_ref",
            'family = "elementwise"\nout_arg = "out"',
        ),
        op("deterministic", "scale", "scale_ref", 'family = "elementwise"\ndeterministic = true'),
        op("nondeterministic", "noisy", "scale_ref", 'family = "elementwise"\ndeterministic = true'),
        op(
            "gelu_rne",
            "gelu_rne",
            "gelu_ref",
            'family = "elementwise"',
            "M = [64]\nN = [1024]",
            '["bfloat16"]',
        ),
        op(
            "gelu_truncating",
            "gelu_truncating",
            "gelu_ref",
            'family = "elementwise"',
            "M = [64]\nN = [1024]",
            '["bfloat16"]',
        ),
        op(
            "custom_sum",
            "sum_rows",
            "sum_rows_ref",
            'family = "custom"\nerror_scale = "k:sum_scale"\noutput = ["M"]',
            dtypes='["float16"]',
        ),
        op(
            "custom_sum_fp16_acc",
            "sum_rows_fp16_acc",
            "sum_rows_ref",
            'family = "custom"\nerror_scale = "k:sum_scale"\noutput = ["M"]',
            dtypes='["float16"]',
        ),
        op(
            "relative_sum",
            "sum_rows",
            "sum_rows_ref",
            'family = "reduction"\nnaive = "k:sum_rows_naive"\noutput = ["M"]',
            dtypes='["float16"]',
        ),
        op(
            "relative_sum_skip_tail",
            "sum_rows_skip_tail",
            "sum_rows_ref",
            'family = "reduction"\nnaive = "k:sum_rows_naive"\noutput = ["M"]',
            dtypes='["float16"]',
        ),
    ]
)

EXPECTED = {
    "clean": ("passed", None),
    "mutates_input": ("failed", "inputs_modified"),
    "writes_out": ("passed", None),
    "leaves_tail_unwritten": ("failed", "unwritten"),
    "deterministic": ("passed", None),
    "nondeterministic": ("failed", "nondeterministic"),
    "gelu_rne": ("passed", None),
    "gelu_truncating": ("failed", "bias"),
    "custom_sum": ("passed", None),
    "custom_sum_fp16_acc": ("failed", "mismatch"),
    "relative_sum": ("passed", None),
    "relative_sum_skip_tail": ("failed", "mismatch"),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root: Path = tmp_path_factory.mktemp("checks")
    (root / "k.py").write_text(KERNELS)
    (root / "gpuemu.toml").write_text(CONFIG)
    config = load_config(root / "gpuemu.toml", env={"GPUEMU_USER_CONFIG": "none"})
    document = to_builtins(run_gate(config, RunOptions(out_dir=root / "out", jobs=2), gpu=None))
    return {op["name"]: op for op in document["ops"]}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_check_flags_the_violating_kernel_only(results, name):
    status, kind = EXPECTED[name]
    op = results[name]
    assert op["status"] == status, (name, [f["message"][:200] for f in op["failures"][:2]])
    if kind is not None:
        assert kind in {f["kind"] for f in op["failures"]}, [f["kind"] for f in op["failures"]]


def test_the_comparator_is_recorded_per_op(results):
    assert results["clean"]["comparator"] == "bound"
    assert results["relative_sum"]["comparator"] == "baseline_relative"
