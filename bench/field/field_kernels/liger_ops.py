"""Thin `framework = "torch"` wrappers over Liger-Kernel's public functional API (liger_kernel 0.8.5).

Each wrapper is what a user would register in gpuemu.toml: it takes the fuzzed CPU tensors as keyword
arguments and calls Liger the way a model does. Without a GPU gpuemu-ci sets TRITON_INTERPRET=1 in the worker,
so every call below runs Liger's Triton kernels through Triton's interpreter; `liger_compat.install()` first
makes the interpreter able to run them at all (see that module).
"""

from __future__ import annotations

from typing import Any

from field_kernels import liger_compat

liger_compat.install()  # before anything imports liger_kernel.ops

import torch  # noqa: E402
from liger_kernel.transformers import functional as liger  # noqa: E402

Tensor = torch.Tensor


def rms_norm(
    x: Tensor, weight: Tensor, eps: float = 1e-6, offset: float = 0.0, casting_mode: str = "llama"
) -> Tensor:
    # in_place only concerns the backward (dY reused as dX); the forward never writes into x.
    return liger.liger_rms_norm(x, weight, eps, offset=offset, casting_mode=casting_mode, in_place=False)


def fused_add_rms_norm(
    x: Tensor, residual: Tensor, weight: Tensor, eps: float = 1e-6
) -> tuple[Tensor, Tensor]:
    return liger.liger_fused_add_rms_norm(x, residual, weight, eps, in_place=False)


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    return liger.liger_layer_norm(x, weight, bias, eps)


def group_norm(x: Tensor, weight: Tensor, bias: Tensor, num_groups: int = 4, eps: float = 1e-5) -> Tensor:
    return liger.liger_group_norm(x, weight, bias, x.shape[1], num_groups, eps)


def softmax(x: Tensor) -> Tensor:
    return liger.liger_softmax(x)


def private_copy(t: Tensor) -> Tensor:
    """A copy with the same sizes and strides (row padding included, poisoned with NaN), in its own memory.

    Liger's cross-entropy zeroes, in place, the logits rows whose target is ignore_index (the storage it
    reuses for gradients), even when no gradient is wanted; a caller that still needs its logits hands it a
    copy. Keeping the strides keeps what the kernel sees (a padded row stride) unchanged. Only a tensor with
    gaps is filled first: a contiguous one's copy overwrites its whole span (the fill cost as much as the copy)."""
    if any(s == 0 and n > 1 for s, n in zip(t.stride(), t.shape, strict=True)):
        return t.clone()  # an expanded tensor: its rows alias, and no copy can keep that
    span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True)) if t.numel() else 0
    out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
    if t.dtype.is_floating_point and span and not t.is_contiguous():  # contiguous: the copy writes every byte
        out.as_strided((span,), (1,)).fill_(float("nan"))
    return out.copy_(t)


def cross_entropy(
    logits: Tensor,
    target: Tensor,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    lse_square_scale: float = 0.0,
    softcap: float = 0.0,
) -> Tensor:
    """Per-token loss (reduction="none"), the form a trainer that masks or reweights tokens calls."""
    return liger.liger_cross_entropy(
        private_copy(logits),
        target,
        ignore_index=ignore_index,
        label_smoothing=label_smoothing,
        lse_square_scale=lse_square_scale,
        softcap=softcap or None,  # TOML has no null: 0 means off
        reduction="none",
    )


def linear_cross_entropy(
    x: Tensor, weight: Tensor, target: Tensor, ignore_index: int = -100, label_smoothing: float = 0.0
) -> Tensor:
    """The fused lm-head + loss: never materialises the [BT, V] logits at once (per-token loss, fp32)."""
    return liger.liger_fused_linear_cross_entropy(
        x, weight, target, ignore_index=ignore_index, label_smoothing=label_smoothing, reduction="none"
    )


def swiglu(a: Tensor, b: Tensor) -> Tensor:
    return liger.liger_swiglu(a, b)


def geglu(a: Tensor, b: Tensor) -> Tensor:
    return liger.liger_geglu(a, b)


def relu_squared(x: Tensor) -> Tensor:
    return liger.liger_relu_squared(x)


def rotary_width(head_dim: int, rotary_fraction: float) -> int:
    """Even and at least 2 (Liger rejects 0), as partial-RoPE models round it."""
    return max(2, int(head_dim * rotary_fraction) // 2 * 2)


def rope_tables(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, rotary_fraction: float = 1.0) -> Any:
    """HF-style call: cos/sin [S, rd] laid out as cat(freqs, freqs); the fuzzed [S, D] tables supply the
    frequencies in their first rd / 2 columns (rd = the rotary width; partial RoPE when rotary_fraction < 1)."""
    rd = rotary_width(q.shape[-1], rotary_fraction)
    freqs_cos, freqs_sin = cos[:, : rd // 2], sin[:, : rd // 2]
    cos_rd = torch.cat([freqs_cos, freqs_cos], dim=-1)
    sin_rd = torch.cat([freqs_sin, freqs_sin], dim=-1)
    return liger.liger_rope(q, k, cos_rd, sin_rd, rotary_dim=rd)
