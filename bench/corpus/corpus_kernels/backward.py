"""Training kernels with a hand-written backward (issue #20), in torch on the CPU: fused RMSNorm, softmax
cross-entropy and SwiGLU as `torch.autograd.Function`s that compute in float32 and store in the input dtype,
as GPU kernels do; their fp64 references (plain torch, differentiated by autograd); and the backward bugs the
field ships: a gradient accumulated with `=` instead of `+=`, a missing chain-rule term, a reduction over the
wrong axis, a gradient stored in bf16 by truncation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

ROW_BLOCK = 64  # rows per block of the weight-gradient accumulation (a kernel's grid-stride loop)


def _t(x: Any) -> torch.Tensor:
    """The references are called with NumPy float64 arrays (forward) or torch tensors (autograd)."""
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x))


# ---- references (fp64, differentiable) --------------------------------------------------------------------


def rmsnorm_reference(x: Any, weight: Any, eps: float = 1e-5) -> torch.Tensor:
    x, weight = _t(x), _t(weight)
    return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps) * weight


def softmax_xent_reference(logits: Any, target: Any, ignore_index: int = -100) -> torch.Tensor:
    logits, target = _t(logits), _t(target).long()
    keep = target != ignore_index
    picked = logits.gather(1, torch.where(keep, target, 0)[:, None])[:, 0]
    return torch.where(keep, torch.logsumexp(logits, dim=-1) - picked, torch.zeros_like(picked))


def swiglu_reference(a: Any, b: Any) -> torch.Tensor:
    a, b = _t(a), _t(b)
    return torch.nn.functional.silu(a) * b


# ---- RMSNorm ----------------------------------------------------------------------------------------------


def _truncate_to_bf16(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> bf16 by dropping the low 16 bits (round toward zero), as a hand-rolled store does."""
    bits = x.float().contiguous().view(torch.int32) & ~0xFFFF
    return bits.view(torch.float32).to(torch.bfloat16)


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float, bug: str) -> torch.Tensor:
        xf, wf = x.float(), weight.float()
        rstd = torch.rsqrt((xf * xf).mean(dim=-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        ctx.bug = bug
        return (xf * rstd * wf).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, weight, rstd = ctx.saved_tensors
        bug = ctx.bug
        xf, gf = x.float(), grad.float()
        xhat = xf * rstd
        gw = gf * weight.float()
        if bug == "missing_chain_term":
            dx = rstd * gw  # drops the -xhat * mean(gw * xhat) term of d rstd / dx
        elif bug == "reduce_wrong_axis":
            dx = rstd * (gw - xhat * (gw * xhat).mean(dim=0, keepdim=True))  # over the rows, not the row
        else:
            dx = rstd * (gw - xhat * (gw * xhat).mean(dim=-1, keepdim=True))
        # The weight's gradient sums over every row: a grid-stride loop over row blocks.
        dw = torch.zeros_like(xhat[0])
        for start in range(0, xhat.shape[0], ROW_BLOCK):
            block = (gf[start : start + ROW_BLOCK] * xhat[start : start + ROW_BLOCK]).sum(dim=0)
            dw = block if bug == "acc_assign" else dw + block  # acc_assign: the last block only
        dx_out = _truncate_to_bf16(dx).to(x.dtype) if bug == "truncating_bf16_store" else dx.to(x.dtype)
        return dx_out, dw.to(weight.dtype), None, None


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return _RMSNorm.apply(x, weight, eps, "")


def rmsnorm_dw_acc_assign(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return _RMSNorm.apply(x, weight, eps, "acc_assign")


def rmsnorm_dx_truncating_bf16(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return _RMSNorm.apply(x, weight, eps, "truncating_bf16_store")


def rmsnorm_dx_missing_term(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return _RMSNorm.apply(x, weight, eps, "missing_chain_term")


def rmsnorm_dx_wrong_axis(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return _RMSNorm.apply(x, weight, eps, "reduce_wrong_axis")


def rmsnorm_autograd(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """A hard negative: no hand-written backward, torch's own (fp32 math through autograd)."""
    xf = x.float()
    return (xf * torch.rsqrt((xf * xf).mean(dim=-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


# ---- softmax cross-entropy ---------------------------------------------------------------------------------


class _SoftmaxXent(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, target: torch.Tensor, ignore_index: int, bug: str) -> Any:
        lf = logits.float()
        lse = torch.logsumexp(lf, dim=-1)
        keep = target != ignore_index
        safe = torch.where(keep, target, 0).long()
        loss = torch.where(keep, lse - lf.gather(1, safe[:, None])[:, 0], torch.zeros_like(lse))
        ctx.save_for_backward(logits, safe, keep, lse)
        ctx.bug = bug
        return loss.to(logits.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        logits, safe, keep, lse = ctx.saved_tensors
        lf = logits.float()
        probs = torch.exp(lf - lse[:, None])
        if ctx.bug == "reduce_wrong_axis":
            probs = torch.softmax(lf, dim=0)  # normalised over the batch, not the vocabulary
        onehot = torch.zeros_like(probs).scatter_(1, safe[:, None], 1.0)
        scale = keep.float()
        if ctx.bug != "missing_chain_term":
            scale = scale * grad.float()  # missing_chain_term: the upstream gradient is never applied
        return ((probs - onehot) * scale[:, None]).to(logits.dtype), None, None, None


def softmax_xent(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    return _SoftmaxXent.apply(logits, target, ignore_index, "")


def softmax_xent_no_upstream(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100) -> Any:
    return _SoftmaxXent.apply(logits, target, ignore_index, "missing_chain_term")


def softmax_xent_wrong_axis(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100) -> Any:
    return _SoftmaxXent.apply(logits, target, ignore_index, "reduce_wrong_axis")


def softmax_xent_autograd(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100) -> Any:
    """A hard negative: torch's own cross-entropy and its backward, in float32."""
    loss = torch.nn.functional.cross_entropy(
        logits.float(), target.long(), ignore_index=ignore_index, reduction="none"
    )
    return loss.to(logits.dtype)


# ---- SwiGLU -------------------------------------------------------------------------------------------------


class _SwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor, bug: str) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        ctx.bug = bug
        af = a.float()
        return (af * torch.sigmoid(af) * b.float()).to(a.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        a, b = ctx.saved_tensors
        af, bf, gf = a.float(), b.float(), grad.float()
        s = torch.sigmoid(af)
        dsilu = s * (1.0 + af * (1.0 - s))  # d(a s)/da = s + a s (1 - s)
        if ctx.bug == "missing_chain_term":
            dsilu = s  # the second term is missing
        return (gf * bf * dsilu).to(a.dtype), (gf * af * s).to(b.dtype), None


def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _SwiGLU.apply(a, b, "")


def swiglu_missing_term(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _SwiGLU.apply(a, b, "missing_chain_term")


def swiglu_autograd(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A hard negative: torch's own silu and product, differentiated by autograd in float32."""
    return (torch.nn.functional.silu(a.float()) * b.float()).to(a.dtype)
