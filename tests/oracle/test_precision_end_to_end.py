"""Issue #44 in real runs: a correct rotary kernel computes its angles in float32 from integer positions. No
input moves them, so nothing the gate measures from the reference shows what their rounding costs, whether the
reference derives them in the dtype of its inputs or computes in float64 whatever it is given: the failure and
`calibrate` suggest declaring them (`[ops.intermediates]`), and declared, the same kernel passes with either
reference while wrong angles (an ignored offset, positions rounded to bfloat16) still fail, the message saying
what the allowance is made of."""

from __future__ import annotations

import json

import pytest

# Each test runs whole suites or processes: seconds each (the fast tier, -m "not slow", leaves them out).
pytestmark = pytest.mark.slow

OPS = """
import numpy as np

F32 = np.float32


def _angles(t, d, offset, base, dtype):
    exponents = np.arange(0, d, 2, dtype=F32) / F32(d)
    inv_freq = (F32(1.0) / np.power(F32(base), exponents)).astype(dtype)
    return ((np.arange(t) + offset).astype(dtype)[:, None] * inv_freq[None, :]).astype(F32)


def _rotate(x, angles):
    half = angles.shape[-1]
    c, s = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    xf = x.astype(F32)
    out = xf.copy()
    out[..., :half] = xf[..., :half] * c - xf[..., half:] * s
    out[..., half:] = xf[..., half:] * c + xf[..., :half] * s
    return out.astype(x.dtype)


def rope(x, position_offset=0, base=10000.0):
    t, _, d = x.shape
    return _rotate(x, _angles(t, d, position_offset, base, F32))


def rope_no_offset(x, position_offset=0, base=10000.0):
    t, _, d = x.shape
    return _rotate(x, _angles(t, d, 0, base, F32))


def rope_bf16_positions(x, position_offset=0, base=10000.0):
    # positions rounded to bfloat16 before the product (a real bug: angles 8 rad off at position 2048)
    import ml_dtypes

    t, _, d = x.shape
    exponents = np.arange(0, d, 2, dtype=F32) / F32(d)
    inv_freq = F32(1.0) / np.power(F32(base), exponents)
    positions = (np.arange(t) + position_offset).astype(ml_dtypes.bfloat16).astype(F32)
    return _rotate(x, positions[:, None] * inv_freq[None, :])


def reference(x, position_offset=0, base=10000.0):
    # In x's dtype: exact in float64, what a careful float32 kernel computes in float32.
    t, _, d = x.shape
    inv_freq = 1.0 / np.power(np.asarray(base, dtype=x.dtype), np.arange(0, d, 2, dtype=x.dtype) / d)
    angles = (np.arange(t) + position_offset).astype(x.dtype)[:, None] * inv_freq[None, :]
    c, s = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    half = d // 2
    out = x.copy()
    out[..., :half] = x[..., :half] * c - x[..., half:] * s
    out[..., half:] = x[..., half:] * c + x[..., :half] * s
    return out
"""

FLOAT64_REFERENCE = """

def reference_f64(x, position_offset=0, base=10000.0):
    # What many users write: everything in float64 whatever the inputs.
    return reference(x.astype(np.float64), position_offset, base)
"""

CONFIG = """
[validation]
dtypes = ["float32"]
seed = 3

[[ops]]
name = "rope"
op = "ropeops:{op}"
reference = "ropeops:{reference}"
family = "elementwise"
kwargs = {{ position_offset = [2048], base = [500000.0] }}
constraints = ["D % 2 == 0"]
{extra}
[ops.dims]
T = {{ min = 1, max = 512, typical = [256] }}
H = [4]
D = {{ min = 2, max = 128, typical = [64] }}
[ops.inputs]
x = ["T", "H", "D"]
"""
DECLARED = 'intermediates = { angle = { effect = "rotation", max = "T + position_offset" } }'
REFERENCES = ["reference", "reference_f64"]


def run(make_project, cli, op: str, reference: str, extra: str = "") -> tuple[int, dict, object]:
    config = make_project(
        CONFIG.format(op=op, reference=reference, extra=extra), {"ropeops.py": OPS + FLOAT64_REFERENCE}
    )
    out = config.parent / "out"
    result = cli("run", "--config", config, "--out", out, "--no-lint")
    return result.code, json.loads((out / "results.json").read_text())["ops"][0], config


@pytest.mark.parametrize("reference", REFERENCES)
def test_fp32_angles_from_positions_pass_once_declared_whatever_the_reference(make_project, cli, reference):
    code, op, config = run(make_project, cli, "rope", reference)
    assert (
        code == 1 and op["status"] == "failed"
    )  # nothing measures the angles' rounding: no input moves them
    message = op["failures"][0]["message"]
    assert "the error grows with the position along T" in message
    assert 'intermediates = { angle = { effect = "rotation", max = "T + position_offset" } }' in message
    calibrated = cli("calibrate", "--config", config, "--iterations", "4")
    assert calibrated.code == 1
    assert "rope: the error grows with the position along T" in calibrated.output
    code, op, _ = run(make_project, cli, "rope", reference, DECLARED)
    assert code == 0 and op["status"] == "passed", op["failures"][:1]


@pytest.mark.parametrize("reference", REFERENCES)
@pytest.mark.parametrize("wrong", ["rope_no_offset", "rope_bf16_positions"])
def test_declared_angles_do_not_excuse_wrong_angles(make_project, cli, wrong, reference):
    code, op, _ = run(make_project, cli, wrong, reference, DECLARED)
    assert code == 1 and op["status"] == "failed"
    message = op["failures"][0]["message"]
    assert "the bound counts the declared angle `angle`" in message
    assert "allowed = 4 × max(elementwise bound" in message
