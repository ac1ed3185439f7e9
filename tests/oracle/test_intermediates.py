"""Issue #32's 16-bit intermediates and scatter-add gradients, on PyTorch's own CPU kernels (correct by
definition) and on realistic bugs next to them:

- composed elementwise ops evaluated op by op in 16 bits (kl_div, a rotary built from torch ops);
- log-softmax rows and a cross-entropy in 16 bits (x - lse from 16-bit operands);
- gradients that scatter-add in the gradient's dtype (embedding, embedding bag, max-pool) and the ties of a
  selection (max-pool's gradient routed to another equal element).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from gpuemu_ci.config.model import Family, InputSpec, Validation, ValueKind
from gpuemu_ci.oracle import bounds, gathers, gradients, intermediates
from gpuemu_ci.oracle.ties import excused_at_ties
from tests.oracle.test_working_precision import make_op

torch = pytest.importorskip("torch")
F = torch.nn.functional
TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def _bound(op, r, inputs, dtype, reference_abs=None, linear=(), kwargs=None, dims=None):
    return bounds.allowed_error(
        op,
        bounds.BoundInputs(
            r, inputs, reference_abs, dims or {}, kwargs or {}, dtype, dtype, linear_inputs=tuple(linear)
        ),
    )


def _headroom(y, r, allowed) -> float:
    return float(np.max(np.abs(np.asarray(y, dtype=np.float64) - r) / allowed))


# --- composed elementwise ops ----------------------------------------------------------------------------------
def _kl(logp, target):
    safe = torch.where(target > 0, target, torch.ones_like(target))
    return torch.where(target > 0, target * (torch.log(safe) - logp), torch.zeros_like(target))


def _kl_case(dtype: str):
    rng = np.random.default_rng(7)
    logits = rng.standard_normal((64, 1025)) * 3
    logp = torch.log_softmax(torch.from_numpy(logits), -1).to(TORCH_DTYPES[dtype])
    # Targets close to exp(logp): target log target and target logp cancel, as a trained model's do.
    target = torch.softmax(torch.from_numpy(logits * 1.01), -1).to(TORCH_DTYPES[dtype])
    lp64, t64 = logp.double(), target.double()
    r = _kl(lp64, t64).numpy()
    r_abs = _kl(lp64.abs(), t64.abs()).numpy()
    return logp, target, {"logp": lp64.numpy(), "target": t64.numpy()}, r, r_abs


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_kl_div_rounded_op_by_op_in_16_bits_passes_and_the_reverse_direction_fails(dtype):
    spec = (InputSpec("logp", ("M", "N")), InputSpec("target", ("M", "N")))
    op = make_op(Family.ELEMENTWISE, spec)
    logp, target, inputs, r, r_abs = _kl_case(dtype)
    torch_y = F.kl_div(logp, target, reduction="none").double().numpy()
    dims = {"M": 64, "N": 1025}
    allowed = _bound(op, r, inputs, dtype, r_abs, dims=dims)
    assert _headroom(torch_y, r, allowed) < 0.5
    # Without the intermediates' roundings (the float32 model), torch's own kl_div fails.
    declared = make_op(Family.ELEMENTWISE, spec, accumulator="float32")
    assert _headroom(torch_y, r, _bound(declared, r, inputs, dtype, r_abs, dims=dims)) > 2
    # A bug of realistic size: the KL of the other direction, exp(logp) (logp - log target).
    reverse = _kl(target.double(), logp.double().exp()).neg().to(TORCH_DTYPES[dtype]).double().numpy()
    assert _headroom(reverse, r, allowed) > 5
    # kl_div is linear in neither input: no input magnitude widens it (|logp| would be 1/target too loose).
    doubled = [_kl(torch.from_numpy(inputs["logp"] * 2), torch.from_numpy(inputs["target"])).numpy()]
    assert not intermediates.linear_in([r], doubled)


def _rotary(x, rounded_to=None, position_dtype=torch.float64):
    """Rotate-half with angles of positions 2048..2048+T-1 (rounded to `position_dtype`); cos/sin rounded to
    `rounded_to` and the rotation in x's dtype when given."""
    t, _, d = x.shape
    inv_freq = 1.0 / 10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    positions = (torch.arange(t, dtype=torch.float64) + 2048).to(position_dtype).double()  # a cache offset
    angles = torch.outer(positions, inv_freq)
    cos = torch.cat([angles.cos(), angles.cos()], -1)[:, None, :]
    sin = torch.cat([angles.sin(), angles.sin()], -1)[:, None, :]
    if rounded_to is not None:
        cos, sin = cos.to(rounded_to), sin.to(rounded_to)
    half = d // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_rotary_in_16_bits_passes_through_its_linearity_and_angles_rounded_to_16_bits_fail(dtype):
    op = make_op(Family.ELEMENTWISE, (InputSpec("x", ("T", "H", "D")),))
    rng = np.random.default_rng(3)
    x = torch.from_numpy(rng.standard_normal((512, 4, 64)) * 8).to(TORCH_DTYPES[dtype])
    x64 = x.double()
    r = _rotary(x64).numpy()
    r_abs = _rotary(x64.abs()).numpy()
    inputs = {"x": x64.numpy()}
    # The probe the judge runs: doubling x doubles the reference exactly.
    assert intermediates.linear_in([r], [_rotary(x64 * 2).numpy()])
    torch_y = _rotary(x, rounded_to=x.dtype).double().numpy()  # cos/sin and every product in x's dtype
    dims = {"T": 512, "H": 4, "D": 64}
    allowed = _bound(op, r, inputs, dtype, r_abs, linear=("x",), dims=dims)
    assert _headroom(torch_y, r, allowed) < 0.5
    # The reference on |x| alone cancels where cos and sin differ in sign: x's magnitude is needed.
    assert _headroom(torch_y, r, _bound(op, r, inputs, dtype, r_abs, dims=dims)) > 1
    # Positions rounded to the 16-bit dtype (angles 0.25 rad off past 256 in fp16) still fail.
    wrong = _rotary(x, rounded_to=x.dtype, position_dtype=x.dtype).double().numpy()
    assert _headroom(wrong, r, allowed) > 5


# --- log-domain rows ---------------------------------------------------------------------------------------------
def test_log_softmax_in_float16_passes_and_a_missing_log_sum_term_fails():
    op = make_op(Family.SOFTMAX, (InputSpec("x", ("M", "N")),))
    rng = np.random.default_rng(5)
    # Rows near 64 with one element far above the rest: there x - lse is about -1e-5, lse about 88.
    values = rng.standard_normal((33, 65)) * 8 + 64
    values[:, 0] = 88
    x = torch.from_numpy(values).to(torch.float16)
    x64 = x.double()
    r = torch.log_softmax(x64, -1).numpy()
    y = torch.log_softmax(x, -1).double().numpy()
    dims = {"M": 33, "N": 65}
    allowed = _bound(op, r, {"x": x64.numpy()}, "float16", dims=dims)
    assert _headroom(y, r, allowed) < 0.5
    declared = make_op(Family.SOFTMAX, (InputSpec("x", ("M", "N")),), accumulator="float32")
    assert _headroom(y, r, _bound(declared, r, {"x": x64.numpy()}, "float16", dims=dims)) > 1
    # A blocked loop whose sum of exponentials skips its first block of 16 columns (and the row's maximum).
    shifted = x64 - x64.max(-1, keepdim=True).values
    wrong = (shifted - torch.log(shifted[:, 16:].exp().sum(-1, keepdim=True))).half().double().numpy()
    assert _headroom(wrong, r, allowed) > 3
    # Softmax rows (probabilities) are not log-domain rows: no absolute term there.
    p = torch.softmax(x64, -1).numpy()
    assert np.all(intermediates.log_domain_term(op, "float16", x64.numpy(), p, -1) == 0)


def test_cross_entropy_in_float16_passes_and_ignoring_the_target_fails():
    spec = (
        InputSpec("logits", ("BT", "V")),
        InputSpec("target", ("BT",), dtype="int64", kind=ValueKind.INDEX, high="V"),
    )
    op = make_op(Family.REDUCTION, spec, output=("BT",))
    rng = np.random.default_rng(9)
    logits = torch.from_numpy(rng.standard_normal((32, 5)) * 2).to(torch.float16)
    target = torch.from_numpy(rng.integers(0, 5, 32))
    x64 = logits.double()
    r = F.cross_entropy(x64, target, reduction="none").numpy()
    y = F.cross_entropy(logits, target, reduction="none").double().numpy()
    r_abs = F.cross_entropy(x64.abs(), target, reduction="none").numpy()
    dims = {"BT": 32, "V": 5}
    allowed = _bound(op, r, {"logits": x64.numpy()}, "float16", r_abs, dims=dims)
    assert _headroom(y, r, allowed) < 0.5
    # A loss that picks the wrong class (target shifted by one) is far outside.
    wrong = F.cross_entropy(logits, (target + 1) % 5, reduction="none").double().numpy()
    assert _headroom(wrong, r, allowed) > 10


# --- scatter-add gradients and ties -----------------------------------------------------------------------------
def _gradient_case(name, r, r_abs, dtype, dims, inputs=None, kwargs=None, counted=None):
    return gradients.GradientCase(
        dtype=dtype,
        dims=dims,
        names=(name,),
        input_dtypes={name: dtype},
        reference=(r,),
        reference_abs=(r_abs,),
        low=lambda: None,
        inputs=inputs or {},
        kwargs=kwargs or {},
        counted=(counted,) if counted is not None else None,
    )


def _embedding_grads(dtype: str, assign: bool = False):
    rng = np.random.default_rng(11)
    ids = torch.from_numpy(rng.integers(0, 16, (4, 256)))  # every id about 64 times
    weight = torch.from_numpy(rng.standard_normal((16, 32))).to(TORCH_DTYPES.get(dtype, torch.float32))
    upstream = torch.from_numpy(rng.standard_normal((4, 256, 32))).to(weight.dtype)
    w = weight.clone().requires_grad_()
    F.embedding(ids, w).backward(upstream)
    g = w.grad.float().numpy()
    if assign:  # the bug: each occurrence overwrites the row instead of adding to it
        g = np.zeros_like(g)
        flat_ids, flat_up = ids.reshape(-1).numpy(), upstream.reshape(-1, 32).float().numpy()
        g[flat_ids] = flat_up
    reference, magnitude, counted = np.zeros((16, 32)), np.zeros((16, 32)), np.zeros((16, 32))
    flat = ids.reshape(-1).numpy()
    np.add.at(reference, flat, upstream.reshape(-1, 32).double().numpy())
    np.add.at(magnitude, flat, np.abs(upstream.reshape(-1, 32).double().numpy()))
    np.add.at(counted, flat, 1.0)
    return g, reference, magnitude, counted


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_an_embedding_gradient_accumulated_in_16_bits_passes_and_one_that_assigns_fails(dtype):
    spec = (
        InputSpec("ids", ("B", "T"), dtype="int64", kind=ValueKind.INDEX, high="V"),
        InputSpec("weight", ("V", "D")),
    )
    op = make_op(Family.EXACT, spec, output=("B", "T", "D"))
    dims = {"B": 4, "T": 256, "V": 16, "D": 32}
    g, r, r_abs, counted = _embedding_grads(dtype)
    case = _gradient_case("weight", r, r_abs, dtype, dims, counted=counted)
    as_dtype = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[dtype]
    verdict = gradients.judge_gradients(op, case, (g.astype(as_dtype),), None, Validation())
    assert not verdict.findings, verdict.findings
    wrong, _, _, _ = _embedding_grads(dtype, assign=True)
    verdict = gradients.judge_gradients(op, case, (wrong.astype(as_dtype),), None, Validation())
    message = verdict.findings[0].message if verdict.findings else ""
    assert message.startswith("grad of weight") and f"a scatter-add accumulated in {dtype}" in message


def test_an_embedding_bag_gradient_counts_its_ids_not_its_bags():
    spec = (
        InputSpec("ids", ("L",), dtype="int64", kind=ValueKind.INDEX, high="V"),
        InputSpec("weight", ("V", "D")),
        InputSpec("offsets", ("NB",), dtype="int64", kind=ValueKind.SORTED_OFFSETS, high="L"),
    )
    op = make_op(Family.REDUCTION, spec, output=("NB", "D"))
    dims = {"L": 257, "V": 4096, "D": 15, "NB": 15}
    case = _gradient_case("weight", np.zeros((1, 1)), np.zeros((1, 1)), "float32", dims)
    assert gradients.summed_length(op, case, "weight") == 15  # the bags: what the output's dims say
    assert gathers.index_elements(op, dims, "weight") == 257  # the ids each row may be read by
    # A class target addresses one logit per row: nothing is accumulated there.
    loss = make_op(
        Family.REDUCTION,
        (
            InputSpec("logits", ("BT", "V")),
            InputSpec("target", ("BT",), dtype="int64", kind=ValueKind.INDEX, high="V"),
        ),
        output=("BT",),
    )
    assert gathers.index_elements(loss, {"BT": 8, "V": 100}, "logits") == 1


def _max_pool_grads(x, upstream, kernel: int, stride: int):
    """torch's max-pool gradient, and the reference's (the first of equal maxima), its gradient on |upstream|
    and its count of terms per element (upstream of ones)."""
    xg = x.clone().requires_grad_()
    F.max_pool1d(xg, kernel, stride).backward(upstream)

    def reference(g) -> np.ndarray:
        x64 = x.double().requires_grad_()
        x64.unfold(-1, kernel, stride).max(-1).values.backward(g)
        return np.asarray(x64.grad.numpy())

    up = upstream.double()
    return xg.grad, reference(up), reference(up.abs()), reference(torch.ones_like(up))


def _last_of_ties(x, upstream, kernel: int) -> np.ndarray:
    """A correct max-pool backward (stride 1) that routes each window's gradient to the LAST of its equal maxima,
    accumulating in float32."""
    x64, up = x.double().numpy(), upstream.float().numpy()
    g = np.zeros(x64.shape, dtype=np.float32)
    windows = np.lib.stride_tricks.sliding_window_view(x64, kernel, axis=-1)
    last = kernel - 1 - np.argmax(windows[..., ::-1], axis=-1)
    b, c, o = np.indices(last.shape)
    np.add.at(g, (b, c, o + last), up)
    return g


def test_a_max_pool_gradient_accumulated_in_bf16_or_routed_to_another_tied_element_passes():
    op = make_op(Family.EXACT, (InputSpec("x", ("B", "C", "L")),), output=("B", "C", "LO"))
    rng = np.random.default_rng(2)
    # bf16's 8 bits: many windows hold equal maxima.
    x = torch.from_numpy(np.round(rng.standard_normal((2, 8, 512)) * 4) / 4).to(torch.bfloat16)
    upstream = torch.from_numpy(rng.standard_normal((2, 8, 510))).to(torch.bfloat16)
    g, r, r_abs, counted = _max_pool_grads(x, upstream, 3, 1)
    x64 = x.double().numpy()
    dims = {"B": 2, "C": 8, "L": 512, "LO": 510}
    case = _gradient_case(
        "x", r, r_abs, "bfloat16", dims, inputs={"x": x64}, kwargs={"kernel_size": 3}, counted=counted
    )
    # torch adds the terms of overlapping windows in bf16.
    torch_bf16 = g.float().numpy().astype(ml_dtypes.bfloat16)
    assert not gradients.judge_gradients(op, case, (torch_bf16,), None, Validation()).findings
    # Another correct kernel picks the last of equal maxima: far from the reference element by element.
    last = _last_of_ties(x, upstream, 3)
    assert np.abs(last - r).max() > 0.5
    verdict = gradients.judge_gradients(op, case, (last.astype(ml_dtypes.bfloat16),), None, Validation())
    assert not verdict.findings, verdict.findings
    # One window's term moved to a neighbour that does not tie with the max fails there.
    wrong = last.astype(np.float64)
    b, c, i = next(
        (b, c, i)
        for b, c, i in np.argwhere(wrong != 0)
        if 0 < i < 511
        and x64[b, c, i + 1] != x64[b, c, i]
        and wrong[b, c, i + 1] == 0
        and counted[b, c, i] == 1
    )
    wrong[b, c, i + 1], wrong[b, c, i] = wrong[b, c, i], 0.0
    verdict = gradients.judge_gradients(op, case, (wrong.astype(ml_dtypes.bfloat16),), None, Validation())
    assert verdict.findings and "exceed the baseline_relative allowance" in verdict.findings[0].message


def test_tie_groups_are_judged_by_their_sum_along_the_selection_axis_only():
    x = np.array([[1.0, 3.0, 3.0, 2.0], [3.0, 1.0, 1.0, 3.0]])
    r = np.array([[0.0, 2.0, 0.0, 0.0], [0.5, 0.0, 0.0, 0.0]])
    allowed = np.full(x.shape, 1e-6)
    routed = np.array([[0.0, 0.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.5]])  # to the other tied element
    # Row 0: the tie {1, 2}; row 1: the ties {0, 3} and {1, 2} (zeros both sides).
    assert excused_at_ties(x, routed, r, allowed).sum() == 6
    lost = np.array([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.5]])  # half of the first row's term is lost
    excused = excused_at_ties(x, lost, r, allowed)
    assert not excused[0, 1:3].any() and excused[1].all()
    # Along the other axis nothing ties in the first row's columns 1 and 2.
    assert not excused_at_ties(x, routed, r, allowed, axis=0)[0, 1:3].any()
