"""bench/torch_controls' float64 references are the answer PyTorch's float64 kernels are judged against: their
gradients must not carry rounding noise of their own. A log-sum-exp shifted by its row max and differentiated
through that max adds g (1 - sum p) to one of the row's maxima; on rows of tied maxima (an all-zero row, 56
equal logits) that noise, about n u |g|, is larger than torch's own error, and the float64 check flagged torch."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.support import load_script

torch = pytest.importorskip("torch")
REFERENCE = (
    Path(__file__).resolve().parents[2] / "bench" / "torch_controls" / "torch_controls" / "reference.py"
)


@pytest.fixture(scope="module")
def reference():
    return load_script(REFERENCE, "torch_controls_reference_under_test")


def _gradient(fn, x, upstream, *extra):
    x = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(fn(x, *extra), x, upstream)
    return grad


def test_logsumexp_gradient_of_an_all_zero_row_is_exactly_g_over_n(reference):
    # exp(0 - log 1024) is not exactly 1/1024 in float64, so the row's probabilities do not sum to exactly 1.
    x = torch.zeros(3, 1024, dtype=torch.float64)
    upstream = torch.tensor([-0.5893298021137432, 1.25, 0.3], dtype=torch.float64)
    expected = (upstream / 1024)[:, None].expand(3, 1024)
    assert torch.equal(_gradient(reference.logsumexp, x, upstream), expected)
    assert torch.equal(_gradient(torch.logsumexp, x, upstream, -1), expected)  # torch's own is exact too


def test_cross_entropy_gradient_over_tied_maxima_matches_torch_to_the_last_bits(reference):
    logits = torch.full((2, 300), -1.0, dtype=torch.float64)
    logits[:, :56] = 4.6e77  # 56 tied maxima, beyond float32's range (as the boundary case that was flagged)
    target = torch.tensor([100, 200])  # not a maximum: the noise lands where |grad| = g/56
    upstream = torch.tensor([2.0, -0.75], dtype=torch.float64)
    ours = _gradient(reference.cross_entropy, logits, upstream, target)
    theirs = _gradient(
        torch.nn.functional.cross_entropy, logits, upstream, target, None, None, -100, None, "none"
    )
    # Every element within a few roundings of torch's (the noise put 34 ulps on one tied maximum).
    assert torch.all((ours - theirs).abs() <= 4 * 2.0**-52 * theirs.abs())


def test_log_softmax_gradient_over_tied_maxima_matches_torch_to_the_last_bits(reference):
    x = torch.full((3, 200), -2.0, dtype=torch.float64)
    x[:, :56] = 3.0
    # Multiples of 1/8: sum g is exact in any order, so the two differ only by rounding exp(y) sum g.
    upstream = torch.arange(-300, 300, dtype=torch.float64).reshape(3, 200) / 8
    ours = _gradient(reference.log_softmax, x, upstream)
    theirs = _gradient(torch.log_softmax, x, upstream, -1)
    assert torch.all((ours - theirs).abs() <= 4 * 2.0**-52 * theirs.abs().amax(-1, keepdim=True))


def test_softmax_gradient_over_tied_maxima_matches_torch_to_the_last_bits(reference):
    x = torch.full((3, 200), -2.0, dtype=torch.float64)
    x[:, :56] = 3.0
    upstream = torch.arange(-300, 300, dtype=torch.float64).reshape(3, 200) / 8
    ours = _gradient(reference.softmax, x, upstream)
    theirs = _gradient(torch.softmax, x, upstream, -1)
    # y (g - sum g y) cancels: compare at the scale of the row's terms, sum |g| y. The two orders of evaluation
    # agree within 0.03 of a rounding there; differentiated through the max, 1.4 (row 2).
    terms = (upstream.abs() * torch.softmax(x, -1)).sum(-1, keepdim=True)
    assert torch.all((ours - theirs).abs() <= 0.1 * 2.0**-52 * terms)
