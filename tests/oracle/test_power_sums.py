"""A p-norm's terms underflowing in the working precision (oracle/power_sums.py, issue #32 class 3): PyTorch's
float32 and float64 `torch.linalg.vector_norm` of tiny rows returns 0 or a few bits where the exact norm is a
normal number; the family bound alone (no working-precision run) now allows it, while a norm that drops a term
or misses its root still fails, and a gradient computed from a norm that underflowed to 0 may be its subgradient
0 but not anything else."""

from __future__ import annotations

import numpy as np
import pytest

from gpuemu_ci.config.model import Family, InputSpec, Validation
from gpuemu_ci.oracle import gradients, power_sums
from gpuemu_ci.results.model import FailureKind
from tests.oracle.test_working_precision import allowance, make_op

torch = pytest.importorskip("torch")


def _op(dtype: str):
    return make_op(Family.REDUCTION, (InputSpec("x", ("M", "N"), dtype),), output=("M",))


def _exact_norm(x: np.ndarray, p: float) -> np.ndarray:
    """In float64, scaled by the row's max so that no term underflows."""
    scale = np.abs(x).max(axis=-1, keepdims=True)
    scale = np.where(scale > 0, scale, 1.0)
    return np.asarray(scale[:, 0] * ((np.abs(x) / scale) ** p).sum(axis=-1) ** (1.0 / p))


def _exceeds(got: np.ndarray, x: np.ndarray, p: float, dtype: str) -> bool:
    exact = _exact_norm(x, p)
    allowed = allowance(_op(dtype), exact, {"x": x}, {"M": x.shape[0], "N": x.shape[1]}, exact, dtype=dtype)
    return bool(np.any(np.abs(got - exact) > allowed))


def _rows(scale: float, dtype: str, n: int = 64) -> np.ndarray:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, n)) * scale
    x[0] = scale  # a constant row
    return x.astype(np.dtype(dtype)).astype(np.float64)


def _torch_norm(x: np.ndarray, p: float, dtype: str) -> np.ndarray:
    t = torch.from_numpy(x).to(getattr(torch, dtype))
    return np.asarray(torch.linalg.vector_norm(t, ord=p, dim=-1).double().numpy())


@pytest.mark.parametrize(("dtype", "scale", "p"), [("float32", 2.0**-80, 2.0), ("float32", 1e-30, 3.0),
                                                   ("float64", 1e-170, 2.0)])  # fmt: skip
def test_torch_vector_norm_of_tiny_rows_passes_and_a_norm_missing_a_term_or_its_root_fails(dtype, scale, p):
    x = _rows(scale, dtype)
    got = _torch_norm(x, p, dtype)
    exact = _exact_norm(x, p)
    assert np.all(exact > 0) and np.any(np.abs(got - exact) > 0.5 * exact)  # torch's terms underflowed
    assert not _exceeds(got, x, p, dtype)
    # On rows of regular values the allowance vanishes: a dropped term or a missing root fails.
    regular = _rows(1.0, dtype)
    assert not _exceeds(_torch_norm(regular, p, dtype), regular, p, dtype)
    assert _exceeds(_torch_norm(regular[:, :-1], p, dtype), regular, p, dtype)
    assert _exceeds((np.abs(regular) ** p).sum(axis=-1), regular, p, dtype)


def test_squares_that_are_subnormal_but_not_lost_still_catch_a_dropped_term():
    x = _rows(1e-20, "float32")  # squares ~1e-40: subnormal in float32, a few digits each
    got = _torch_norm(x, 2.0, "float32")
    assert not _exceeds(got, x, 2.0, "float32")
    assert _exceeds(_torch_norm(x[:, :-1], 2.0, "float32"), x, 2.0, "float32")


def test_only_a_p_norm_is_recognised():
    x = _rows(1.0, "float32")
    for p in (2.0, 3.0):
        found = power_sums.norm_power(_op("float32"), _exact_norm(x, p), {"x": x})
        assert found is not None and found[1] == p
    assert power_sums.norm_power(_op("float32"), np.abs(x).sum(axis=-1) * 1.01, {"x": x}) is None
    assert power_sums.norm_power(_op("float32"), x.var(axis=-1), {"x": x}) is None
    assert power_sums.note(_op("float32"), "float32", x.sum(axis=-1), {"x": x}) == ""


class _NormGradient:
    """torch's float64 vector_norm of x (its forward saved, as autograd keeps it) and its gradient for the upstream
    g, the exact gradient, and the gate's verdict on any gradient of that case."""

    def __init__(self, x: np.ndarray, g: np.ndarray) -> None:
        y = _exact_norm(x, 2.0)
        self.exact = g[:, None] * x / y[:, None]
        xt = torch.from_numpy(x).requires_grad_(True)
        saved = torch.linalg.vector_norm(xt, dim=-1)
        (grad,) = torch.autograd.grad(saved, [xt], torch.from_numpy(g))
        self.saved, self.torch = saved.detach().numpy(), grad.numpy()
        self.case = gradients.GradientCase(
            dtype="float64",
            dims={"M": x.shape[0], "N": x.shape[1]},
            names=("x",),
            input_dtypes={"x": "float64"},
            reference=(self.exact,),
            reference_abs=None,
            low=lambda: None,
            inputs={"x": x},
            forward=(y,),
            upstream=(g,),
            saved=(self.saved,),
        )

    def verdict(self, result: np.ndarray) -> gradients.GradientVerdict:
        return gradients.judge_gradients(_op("float64"), self.case, (result,), None, Validation())

    def off_on_regular_rows(self) -> np.ndarray:
        """torch's gradient 0.1% off on the rows from the third on (the regular ones)."""
        wrong: np.ndarray = self.torch.copy()
        wrong[2:] *= 1.001
        return wrong


def test_a_gradient_from_a_norm_that_underflowed_to_zero_may_be_zero_but_not_of_the_wrong_sign():
    x = _rows(1e-170, "float64", n=7)
    norm = _NormGradient(x, np.random.default_rng(8).standard_normal((x.shape[0],)))
    assert np.all(norm.saved == 0) and np.all(norm.torch == 0)  # torch's squares underflowed
    assert not norm.verdict(norm.torch).findings
    wrong = norm.verdict(-norm.exact)
    assert wrong.findings and wrong.findings[0].kind is FailureKind.MISMATCH
    assert "underflowed to 0" in wrong.findings[0].message


def _edge_rows() -> np.ndarray:
    """float64 rows at the bottom of the range: constant rows of the smallest normal and of four smallest
    subnormals (their exact norms are themselves subnormal, rounded to a multiple of 2^-1074), then regular rows."""
    tiny = np.finfo(np.float64)
    x = np.random.default_rng(6).standard_normal((5, 15))
    x[0] = tiny.tiny
    x[1] = -4 * tiny.smallest_subnormal
    return x


def test_a_float64_norm_whose_reference_is_subnormal_is_still_recognised_as_a_norm():
    """A row whose exact norm is subnormal in float64 (sqrt(15) * 2e-323 rounds to 15, not 15.49, of 2^-1074)
    made the reference fail the p-norm form check, which turned the underflow allowance off for the whole case:
    PyTorch's float64 vector_norm (0 on the row of smallest normals) failed 6.7e7 times over, and its gradient
    (0 where the norm underflowed) too."""
    x = _edge_rows()
    found = power_sums.norm_power(_op("float64"), _exact_norm(x, 2.0), {"x": x})
    assert found is not None and found[1] == 2.0
    got = _torch_norm(x, 2.0, "float64")
    assert got[0] == 0.0  # torch's squares underflowed
    assert not _exceeds(got, x, 2.0, "float64")
    assert _exceeds(_torch_norm(x[:, :-1], 2.0, "float64"), x, 2.0, "float64")  # a dropped term still fails

    norm = _NormGradient(x, np.random.default_rng(9).standard_normal((x.shape[0],)))
    assert not norm.verdict(norm.torch).findings
    assert norm.verdict(norm.off_on_regular_rows()).findings


def test_the_power_is_solved_from_rows_whose_norm_is_a_normal_number():
    """Constant rows of 127 values: a row of two smallest subnormals has an exact norm of 22.5 of them, rounded
    to 23, a ratio to its max above sqrt(127); solving p from it gave p != 2 and no norm at all (the thorough
    suite's vector_norm float64 case, 6.7e7x)."""
    tiny = np.finfo(np.float64)
    x = np.ones((4, 127))
    x[0] = 2 * tiny.smallest_subnormal
    x[1] = tiny.tiny
    x[2] = 3.5
    reference = _exact_norm(x, 2.0)
    assert reference[0] / x[0, 0] > np.sqrt(127)  # the subnormal row's rounding
    found = power_sums.norm_power(_op("float64"), reference, {"x": x})
    assert found is not None and found[1] == 2.0


def test_a_row_whose_upstream_gradient_is_subnormal_does_not_hide_the_norm_form_of_the_gradient():
    """An upstream gradient of 1e-323 on a row of 4.6e77 leaves a reference gradient of 0 (g |x| / y underflows),
    so sum x g_ref = 0 where g y = 5e-245 looked resolved: the degree check failed and with it the underflowed
    norm's subgradient 0 on a row of smallest normals (the thorough suite's float64 vector_norm, 6.7e7x)."""
    x = _edge_rows()[[0, 2, 3, 4]]
    x[1] = 4.631683569492648e77
    g = np.asarray(np.random.default_rng(3).standard_normal(x.shape[0]), dtype=np.float64)
    g[1] = 1e-323
    norm = _NormGradient(x, g)
    assert norm.saved[0] == 0.0 and np.all(norm.torch[0] == 0)  # the smallest normals' norm underflowed
    assert not norm.verdict(norm.torch).findings
    assert norm.verdict(norm.off_on_regular_rows()).findings
