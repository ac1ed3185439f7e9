"""SwiGLU, silu(a) * b, as a training kernel is written: a torch.autograd.Function that computes in float32,
stores in the input dtype, and has a hand-written backward.

    y  = a * s * b            with s = sigmoid(a)
    da = g * b * s * (1 + a * (1 - s))
    db = g * a * s

`swiglu_missing_term` is the seeded bug: its backward writes silu's derivative as `s` alone, dropping
`a * s * (1 - s)`. Its forward is exactly right, so only a check of the backward can see it.
"""

from __future__ import annotations

from typing import Any

import torch


class _SwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor, drop_term: bool) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        ctx.drop_term = drop_term
        a32 = a.float()
        return (a32 * torch.sigmoid(a32) * b.float()).to(a.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        a, b = ctx.saved_tensors
        a32, b32, g32 = a.float(), b.float(), grad.float()
        s = torch.sigmoid(a32)
        dsilu = s if ctx.drop_term else s * (1.0 + a32 * (1.0 - s))
        return (g32 * b32 * dsilu).to(a.dtype), (g32 * a32 * s).to(b.dtype), None


def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _SwiGLU.apply(a, b, False)


def swiglu_missing_term(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The seeded bug: the backward forgets the `a * s * (1 - s)` term of d silu / da."""
    return _SwiGLU.apply(a, b, True)
