"""Liger kernels with one realistic bug each: a few-line source diff of the installed Triton kernel (or of the
Python launcher that sets its strides), made at import time by `mutate.mutant`.

Each wrapper takes the same arguments as its correct twin in `liger_ops` and reaches the mutated kernel through
Liger's own launcher (re-created with the kernel swapped), so shapes, block sizes and grids are Liger's.
"""

from __future__ import annotations

from typing import Any

from field_kernels import liger_compat

liger_compat.install()  # before anything imports liger_kernel.ops

import torch  # noqa: E402
from liger_kernel.ops import cross_entropy as ce_mod  # noqa: E402
from liger_kernel.ops import group_norm as gn_mod  # noqa: E402
from liger_kernel.ops import layer_norm as ln_mod  # noqa: E402
from liger_kernel.ops import rms_norm as rms_mod  # noqa: E402
from liger_kernel.ops import rope as rope_mod  # noqa: E402
from liger_kernel.ops import softmax as softmax_mod  # noqa: E402

from field_kernels.liger_ops import private_copy, rotary_width  # noqa: E402
from field_kernels.mutate import mutant  # noqa: E402

Tensor = torch.Tensor

# ---- softmax: the single-block kernel pads the row with 0 instead of -inf --------------------------------
_softmax_kernel_tail_zero = mutant(
    softmax_mod._softmax_single_block_forward_kernel,
    [('other=-float("inf"), cache_modifier=".ca")', 'other=0.0, cache_modifier=".ca")')],
)
_softmax_forward_tail_zero = mutant(
    softmax_mod._softmax_forward, [], {"_softmax_single_block_forward_kernel": _softmax_kernel_tail_zero}
)


def softmax_tail_zero(x: Tensor) -> Tensor:
    return _softmax_forward_tail_zero(x.contiguous())[0]


# ---- cross entropy ---------------------------------------------------------------------------------------
_CE_FIRST_PASS_LOAD = (
    'other=float("-inf"),\n'
    "            # Ensure float32 precision for softmax calculation\n"
    "        ).cast(tl.float32)\n"
    "        if HAS_SOFTCAPPING:\n"
    "            X_block = softcap * tanh(X_block / softcap)\n"
)


def _ce_with(kernel_edits: list[tuple[str, str]], launcher_edits: list[tuple[str, str]]) -> Any:
    kernel = mutant(ce_mod.liger_cross_entropy_kernel, kernel_edits) if kernel_edits else None
    overrides = {"liger_cross_entropy_kernel": kernel} if kernel is not None else {}
    return mutant(ce_mod.cross_entropy_forward, launcher_edits, overrides)


# The online-softmax pass loads the vocabulary tail as 0, not -inf: exp(0 - m) leaks into the sum.
_ce_tail_zero = _ce_with([(_CE_FIRST_PASS_LOAD, _CE_FIRST_PASS_LOAD.replace('float("-inf")', "0.0"))], [])
# The running max starts at 0, not -inf: wrong only once every logit of a row is far below 0.
_ce_max_init_zero = _ce_with(
    [('m = float("-inf")  # m is the max value', "m = 0.0  # m is the max value")], []
)
# The launcher passes the vocabulary size as the row stride (vllm#42739: padded-vocab logits x[:, :V]).
_ce_row_stride_n = _ce_with([], [("X_stride=_input.stride(-2),", "X_stride=V,")])


def _call_ce(
    forward: Any,
    logits: Tensor,
    target: Tensor,
    ignore_index: int,
    label_smoothing: float,
    lse_square_scale: float,
    softcap: float,
) -> Tensor:
    loss, *_ = forward(
        private_copy(logits),
        target,
        None,
        ignore_index,
        lse_square_scale,
        label_smoothing,
        "none",
        softcap or None,
        False,
    )
    return loss


def cross_entropy_tail_zero(
    logits: Tensor,
    target: Tensor,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    lse_square_scale: float = 0.0,
    softcap: float = 0.0,
) -> Tensor:
    return _call_ce(_ce_tail_zero, logits, target, ignore_index, label_smoothing, lse_square_scale, softcap)


def cross_entropy_max_init_zero(
    logits: Tensor,
    target: Tensor,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    lse_square_scale: float = 0.0,
    softcap: float = 0.0,
) -> Tensor:
    return _call_ce(
        _ce_max_init_zero, logits, target, ignore_index, label_smoothing, lse_square_scale, softcap
    )


def cross_entropy_row_stride_n(
    logits: Tensor,
    target: Tensor,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    lse_square_scale: float = 0.0,
    softcap: float = 0.0,
) -> Tensor:
    return _call_ce(
        _ce_row_stride_n, logits, target, ignore_index, label_smoothing, lse_square_scale, softcap
    )


# ---- RMSNorm: eps never reaches the rsqrt --------------------------------------------------------------
_rms_kernel_no_eps = mutant(
    rms_mod._rms_norm_forward_kernel, [("rstd = rsqrt(mean_square + eps)", "rstd = rsqrt(mean_square)")]
)
_rms_forward_no_eps = mutant(rms_mod.rms_norm_forward, [], {"_rms_norm_forward_kernel": _rms_kernel_no_eps})


def rms_norm_eps_ignored(
    x: Tensor, weight: Tensor, eps: float = 1e-6, offset: float = 0.0, casting_mode: str = "llama"
) -> Tensor:
    y, *_ = _rms_forward_no_eps(x.contiguous(), weight.contiguous(), eps, offset, casting_mode, None)
    return y


# ---- LayerNorm: one-pass variance E[x^2] - E[x]^2 ------------------------------------------------------
_ln_kernel_one_pass = mutant(
    ln_mod._layer_norm_forward_kernel,
    [
        (
            "var = tl.sum(X_centered_masked * X_centered_masked, axis=0) / n_cols",
            "var = tl.sum(X_f32 * X_f32, axis=0) / n_cols - mean * mean",
        )
    ],
)
_ln_forward_one_pass = mutant(
    ln_mod.layer_norm_forward, [], {"_layer_norm_forward_kernel": _ln_kernel_one_pass}
)


def layer_norm_one_pass(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    y, *_ = _ln_forward_one_pass(x.contiguous(), weight.contiguous(), bias.contiguous(), eps)
    return y


# ---- GroupNorm: the affine weight indexed by group, not by channel ---------------------------------------
_gn_kernel_weight_by_group = mutant(
    gn_mod._group_norm_forward_kernel,
    [
        (
            "W = tl.load(W_ptr + global_channel, mask=mask)",
            "W = tl.load(W_ptr + global_channel // channels_per_group, mask=mask)",
        )
    ],
)
_gn_forward_weight_by_group = mutant(
    gn_mod.group_norm_forward, [], {"_group_norm_forward_kernel": _gn_kernel_weight_by_group}
)


def group_norm_weight_by_group(
    x: Tensor, weight: Tensor, bias: Tensor, num_groups: int = 4, eps: float = 1e-5
) -> Tensor:
    y, *_ = _gn_forward_weight_by_group(
        x.contiguous(), x.shape[1], num_groups, weight.contiguous(), bias.contiguous(), eps
    )
    return y


# ---- RoPE: the second half of the rotary part located with head_dim / 2 instead of rotary_dim / 2 -------
_rope_kernel_half_head = mutant(
    rope_mod._triton_rope,
    [
        (
            "second_half_q_offsets = first_half_q_offsets + (rd // 2)",
            "second_half_q_offsets = first_half_q_offsets + (hd // 2)",
        ),
        (
            "second_half_k_offsets = first_half_k_offsets + (rd // 2)",
            "second_half_k_offsets = first_half_k_offsets + (hd // 2)",
        ),
    ],
)
_rope_forward_half_head = mutant(rope_mod.rope_forward, [], {"_triton_rope": _rope_kernel_half_head})


def rope_tables_half_head(
    q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, rotary_fraction: float = 1.0
) -> Any:
    rd = rotary_width(q.shape[-1], rotary_fraction)
    freqs_cos, freqs_sin = cos[:, : rd // 2], sin[:, : rd // 2]
    cos_rd = torch.cat([freqs_cos, freqs_cos], dim=-1)
    sin_rd = torch.cat([freqs_sin, freqs_sin], dim=-1)
    q_out, k_out, *_ = _rope_forward_half_head(q, k, cos_rd, sin_rd, None, 1, rd)
    return q_out, k_out
