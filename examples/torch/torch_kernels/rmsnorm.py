"""RMSNorm in plain torch: float32 statistics whatever the input dtype (as a fused kernel keeps them), the
result stored in the input dtype. No hand-written backward: torch's autograd differentiates it, and the gate
judges those gradients like any other output."""

from __future__ import annotations

import torch


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x32 = x.float()
    rstd = torch.rsqrt(x32.square().mean(dim=-1, keepdim=True) + eps)
    return (x32 * rstd * weight.float()).to(x.dtype)
