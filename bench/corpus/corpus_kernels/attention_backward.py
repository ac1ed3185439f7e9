"""Grouped-query attention with a hand-written flash backward (issue #32), in torch on the CPU: a
`torch.autograd.Function` that computes in float32 and stores in the input dtype, as GPU kernels do. The forward
saves the output and the rows' logsumexp; the backward recomputes P = exp(S - L), takes D = rowsum(dO * O) from
the saved output, dS = P (dP - D), and sums each key/value head's gradient over its group of query heads.
Bugs the field ships: dS without the `- D` term (the softmax's chain term), and a GQA key/value gradient taken
from one query head of the group instead of their sum.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch


def _t(x: Any) -> torch.Tensor:
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x))


def reference(q: Any, k: Any, v: Any) -> torch.Tensor:
    """The math in float64: an explicit softmax, K/V heads repeated to the query heads."""
    q, k, v = _t(q), _t(k), _t(v)
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return torch.softmax(scores, dim=-1) @ v


class _FlashGQA(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bug: str) -> torch.Tensor:
        group = q.shape[1] // k.shape[1]
        qf = q.float()
        kf, vf = k.float().repeat_interleave(group, dim=1), v.float().repeat_interleave(group, dim=1)
        scale = 1.0 / math.sqrt(q.shape[-1])
        scores = scale * qf @ kf.transpose(-2, -1)
        lse = torch.logsumexp(scores, dim=-1, keepdim=True)
        out = (torch.exp(scores - lse) @ vf).to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.bug = bug
        return out

    @staticmethod
    def backward(ctx: Any, d_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        group = q.shape[1] // k.shape[1]
        qf, do = q.float(), d_out.float()
        kf, vf = k.float().repeat_interleave(group, dim=1), v.float().repeat_interleave(group, dim=1)
        scale = 1.0 / math.sqrt(q.shape[-1])
        p = torch.exp(scale * qf @ kf.transpose(-2, -1) - lse)
        dp = do @ vf.transpose(-2, -1)
        d = (do * out.float()).sum(dim=-1, keepdim=True)
        ds = p * dp if ctx.bug == "no_d" else p * (dp - d)
        dq = scale * ds @ kf
        dk = scale * ds.transpose(-2, -1) @ qf
        dv = p.transpose(-2, -1) @ do
        b, h, t, dim = dk.shape
        dk = dk.reshape(b, h // group, group, t, dim)
        dv = dv.reshape(b, h // group, group, t, dv.shape[-1])
        if ctx.bug == "one_head":
            dk, dv = dk[:, :, 0], dv[:, :, 0]
        else:
            dk, dv = dk.sum(dim=2), dv.sum(dim=2)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return _FlashGQA.apply(q, k, v, "")  # type: ignore[no-any-return]


def attention_ds_without_d(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return _FlashGQA.apply(q, k, v, "no_d")  # type: ignore[no-any-return]


def attention_gqa_one_head(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return _FlashGQA.apply(q, k, v, "one_head")  # type: ignore[no-any-return]


def attention_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """torch's own fused attention (its CPU flash kernel, forward and backward), K/V repeated to the heads."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)
