"""The ops under test: PyTorch's own CPU kernels, called in the case's dtype exactly as a user's model calls
them. Nothing here upcasts: what torch computes in float16 or bfloat16 is what is judged, forward and backward
(torch autograd)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

# ---- row-wise ----------------------------------------------------------------------------------------------


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def log_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(x, dim=-1)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def group_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, num_groups: int, eps: float = 1e-5
) -> torch.Tensor:
    return F.group_norm(x, num_groups, weight, bias, eps)


# ---- losses ------------------------------------------------------------------------------------------------


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    return F.cross_entropy(logits, target, ignore_index=ignore_index, reduction="none")


def nll_loss(logp: torch.Tensor, target: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    return F.nll_loss(logp, target, ignore_index=ignore_index, reduction="none")


def kl_div(logp: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.kl_div(logp, target, reduction="none")


# ---- attention ---------------------------------------------------------------------------------------------


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)


def sdpa_gqa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False) -> torch.Tensor:
    """Grouped-query attention as most models still write it: K/V heads repeated to the query heads."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)


def sdpa_gqa_bthd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False) -> torch.Tensor:
    """K/V cached as [B, T, KVH, D] (the other common layout), transposed to heads-first views."""
    return sdpa_gqa(q, k.transpose(1, 2), v.transpose(1, 2), is_causal)


# ---- matmul family -----------------------------------------------------------------------------------------


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.linear(x, w, b)


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.matmul(a, b)


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.bmm(a, b)


def baddbmm(
    c: torch.Tensor, a: torch.Tensor, b: torch.Tensor, beta: float = 1.0, alpha: float = 1.0
) -> torch.Tensor:
    return torch.baddbmm(c, a, b, beta=beta, alpha=alpha)


def conv1d(x: torch.Tensor, w: torch.Tensor, stride: int = 1, padding: int = 0) -> torch.Tensor:
    return F.conv1d(x, w, stride=stride, padding=padding)


# ---- pooling, gathers --------------------------------------------------------------------------------------


def max_pool1d(x: torch.Tensor, kernel_size: int = 2, stride: int = 2) -> torch.Tensor:
    return F.max_pool1d(x, kernel_size, stride)


def avg_pool1d(x: torch.Tensor, kernel_size: int = 2, stride: int = 2) -> torch.Tensor:
    return F.avg_pool1d(x, kernel_size, stride)


def embedding(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.embedding(ids, weight)


def embedding_bag(
    ids: torch.Tensor, weight: torch.Tensor, offsets: torch.Tensor, mode: str = "sum"
) -> torch.Tensor:
    return F.embedding_bag(ids, weight, offsets, mode=mode)


# ---- reductions, scans -------------------------------------------------------------------------------------


def cumsum(x: torch.Tensor) -> torch.Tensor:
    return torch.cumsum(x, dim=-1)


def logsumexp(x: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(x, dim=-1)


def vector_norm(x: torch.Tensor, ord: float = 2.0) -> torch.Tensor:
    return torch.linalg.vector_norm(x, ord=ord, dim=-1)


def var(x: torch.Tensor, correction: int = 1) -> torch.Tensor:
    return torch.var(x, dim=-1, correction=correction)


def std(x: torch.Tensor, correction: int = 1) -> torch.Tensor:
    return torch.std(x, dim=-1, correction=correction)


# ---- elementwise -------------------------------------------------------------------------------------------


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    return F.gelu(x, approximate=approximate)


def silu(x: torch.Tensor) -> torch.Tensor:
    return F.silu(x)


def softplus(x: torch.Tensor, beta: float = 1.0) -> torch.Tensor:
    return F.softplus(x, beta=beta)


def rotary(x: torch.Tensor, position_offset: int = 0, base: float = 10000.0) -> torch.Tensor:
    """RoPE built from torch ops in x's dtype, as HF's LlamaRotaryEmbedding does (angles in float32 for 16-bit
    inputs, the rotation in x's dtype)."""
    t, _, d = x.shape
    angle_dtype = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2, dtype=angle_dtype) / d)
    positions = torch.arange(t, dtype=angle_dtype) + position_offset
    angles = torch.outer(positions, inv_freq)
    cos = torch.cat([angles.cos(), angles.cos()], dim=-1).to(x.dtype)[:, None, :]
    sin = torch.cat([angles.sin(), angles.sin()], dim=-1).to(x.dtype)[:, None, :]
    half = d // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin
