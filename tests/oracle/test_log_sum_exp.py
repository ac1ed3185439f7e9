"""A 16-bit log-sum-exp evaluated one rounded intermediate at a time (oracle/log_sum_exp.py), on PyTorch's own CPU
`torch.logsumexp` (correct by definition) and on realistic bugs next to it."""

from __future__ import annotations

import numpy as np
import pytest

from gpuemu_ci.config.model import Family, InputSpec
from gpuemu_ci.oracle import bounds, log_sum_exp
from tests.oracle.test_working_precision import make_op

torch = pytest.importorskip("torch")
TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
SPEC = (InputSpec("x", ("M", "N")),)


def _allowed(op, x64: np.ndarray, r: np.ndarray, dtype: str) -> np.ndarray:
    r_abs = torch.logsumexp(torch.from_numpy(np.abs(x64)), -1).numpy()
    dims = {"M": x64.shape[0], "N": x64.shape[1]}
    return bounds.allowed_error(op, bounds.BoundInputs(r, {"x": x64}, r_abs, dims, {}, dtype, dtype))


def _headroom(y, r, allowed) -> float:
    return float(np.max(np.abs(np.asarray(y, dtype=np.float64) - r) / allowed))


def _all_negative_rows(dtype: str, n: int):
    """The gate's all-negative rows, -(2|b| + 1): the max and the log of the sum cancel (lse near 0)."""
    rng = np.random.default_rng(3)
    return torch.from_numpy(-(2.0 * np.abs(rng.uniform(-1, 1, (64, n))) + 1.0)).to(TORCH_DTYPES[dtype])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("n", [5, 7, 300])
def test_torch_logsumexp_of_all_negative_16_bit_rows_passes_and_a_dropped_max_fails(dtype, n):
    op = make_op(Family.REDUCTION, SPEC, output=("M",))
    x = _all_negative_rows(dtype, n)
    x64 = x.double().numpy()
    r = torch.logsumexp(torch.from_numpy(x64), -1).numpy()
    y = torch.logsumexp(x, -1).double().numpy()
    allowed = _allowed(op, x64, r, dtype)
    assert _headroom(y, r, allowed) < 0.5
    # The op promising float32 intermediates (a declared accumulator) does not get the allowance.
    declared = make_op(Family.REDUCTION, SPEC, output=("M",), accumulator="float32")
    assert np.all(np.asarray(log_sum_exp.term(declared, dtype, r, {"x": x64})) == 0.0)
    # A bug of realistic size: the max not added back in one row in ten (lse - m).
    wrong = y.copy()
    wrong[::10] -= x64.max(axis=-1)[::10]
    assert _headroom(wrong, r, allowed) > 5


def test_torch_float16_logsumexp_fails_without_the_intermediates_term():
    """The flagged control of issue #32: float16 rows of 7 all-negative values, 9.4x over the float32 bound."""
    x = _all_negative_rows("float16", 7)
    x64 = x.double().numpy()
    r = torch.logsumexp(torch.from_numpy(x64), -1).numpy()
    y = torch.logsumexp(x, -1).double().numpy()
    declared = make_op(Family.REDUCTION, SPEC, output=("M",), accumulator="float32")
    assert _headroom(y, r, _allowed(declared, x64, r, "float16")) > 2


def test_a_sum_of_exponentials_accumulated_in_float16_still_fails():
    """The low-precision accumulator the gate exists to catch: exp(x - m) summed in a float16 running sum over
    4,096 columns (the sum reaches thousands, where float16's spacing is 2 or 4)."""
    op = make_op(Family.REDUCTION, SPEC, output=("M",))
    rng = np.random.default_rng(5)
    x = torch.from_numpy(rng.uniform(-1, 1, (8, 4096))).to(torch.float16)
    x64 = x.double().numpy()
    r = torch.logsumexp(torch.from_numpy(x64), -1).numpy()
    m = x.max(-1, keepdim=True).values
    terms = (x - m).exp()
    running = torch.zeros(8, dtype=torch.float16)
    for j in range(4096):
        running = running + terms[:, j]
    y = (running.log() + m[:, 0]).double().numpy()
    assert _headroom(y, r, _allowed(op, x64, r, "float16")) > 2


def test_a_reduction_that_is_no_log_sum_exp_gets_no_term():
    op = make_op(Family.REDUCTION, SPEC, output=("M",))
    x64 = _all_negative_rows("float16", 7).double().numpy()
    assert log_sum_exp.term(op, "float16", x64.sum(axis=-1), {"x": x64}) == 0.0
    assert log_sum_exp.note(op, "float16", x64.sum(axis=-1), {"x": x64}) == ""
