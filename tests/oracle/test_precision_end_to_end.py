"""The working-precision reference in real runs: a correct rotary kernel that computes its angles in float32
passes because the reference run in float32 shows the error that costs; without it (`precision_reference =
false`) the elementwise bound alone flags it. A wrong kernel still fails, and the message says what the
allowance is made of."""

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

CONFIG = """
[validation]
dtypes = ["float32"]
seed = 3

[[ops]]
name = "rope"
op = "ropeops:{op}"
reference = "ropeops:reference"
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


def run(make_project, cli, op: str, extra: str = "") -> tuple[int, dict]:
    config = make_project(CONFIG.format(op=op, extra=extra), {"ropeops.py": OPS})
    out = config.parent / "out"
    result = cli("run", "--config", config, "--out", out, "--no-lint")
    return result.code, json.loads((out / "results.json").read_text())["ops"][0]


def test_fp32_angles_pass_with_the_working_precision_reference_and_fail_without(make_project, cli):
    code, op = run(make_project, cli, "rope")
    assert code == 0 and op["status"] == "passed", op["failures"][:1]
    code, op = run(make_project, cli, "rope", "precision_reference = false")
    assert code == 1 and op["status"] == "failed"
    assert all(f["kind"] == "mismatch" for f in op["failures"])


def test_a_wrong_kernel_still_fails_and_the_message_explains_the_allowance(make_project, cli):
    code, op = run(make_project, cli, "rope_no_offset")
    assert code == 1 and op["status"] == "failed" and op["cases_failed"] == op["cases_total"]
    message = op["failures"][0]["message"]
    assert "allowed = 4 × max(elementwise bound" in message and "2 × the float32 reference's error" in message


FLOAT64_REFERENCE = """

def reference_f64(x, position_offset=0, base=10000.0):
    # What many users write: everything in float64 whatever the inputs, so the float32 run returns the exact answer.
    return reference(x.astype(np.float64), position_offset, base)
"""


def test_a_reference_that_computes_in_float64_whatever_it_is_given_is_named_in_the_failure(make_project, cli):
    config = make_project(
        CONFIG.format(op="rope", extra="").replace("ropeops:reference", "ropeops:reference_f64"),
        {"ropeops.py": OPS + FLOAT64_REFERENCE},
    )
    out = config.parent / "out"
    result = cli("run", "--config", config, "--out", out, "--no-lint")
    op = json.loads((out / "results.json").read_text())["ops"][0]
    assert result.code == 1 and op["status"] == "failed"  # the same correct kernel that passes above
    message = op["failures"][0]["message"]
    assert "the reference computes in float64 whatever it is given" in message
    assert "its run on float32 inputs returned float64" in message and "x.astype(np.float64)" in message
    assert "docs/how-it-decides.md: the working-precision reference" in message
    calibrated = cli("calibrate", "--config", config, "--iterations", "4")
    assert calibrated.code == 1
    assert "rope: the reference computes in float64 whatever it is given" in calibrated.output
