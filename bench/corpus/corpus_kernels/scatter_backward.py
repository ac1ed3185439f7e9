"""Backward passes that scatter-add (issue #32): an embedding's weight gradient and a max-pool's input gradient,
as `torch.autograd.Function`s that accumulate in float32 and store in the input dtype, as GPU kernels do;
PyTorch's own (which accumulates 16-bit gradients in 16 bits) and a max-pool that routes each window to the last
of equal maxima as hard negatives; and the bugs: repeated ids assigned instead of added, and a max-pool's index
computed without the stride.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

F = torch.nn.functional


def _t(x: Any) -> torch.Tensor:
    """The references are called with NumPy float64 arrays (forward) or torch tensors (autograd)."""
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x))


# ---- references (fp64, differentiable) --------------------------------------------------------------------


def embedding_reference(ids: Any, weight: Any) -> torch.Tensor:
    return _t(weight)[_t(ids).long()]


def max_pool_reference(x: Any, kernel_size: int = 2, stride: int = 2) -> torch.Tensor:
    return _t(x).unfold(-1, kernel_size, stride).max(dim=-1).values


# ---- embedding --------------------------------------------------------------------------------------------


class _Embedding(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, ids: torch.Tensor, weight: torch.Tensor, assign: bool) -> torch.Tensor:
        ctx.save_for_backward(ids)
        ctx.rows, ctx.assign = weight.shape[0], assign
        return weight[ids]

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        (ids,) = ctx.saved_tensors
        flat_ids, flat = ids.reshape(-1), grad.reshape(-1, grad.shape[-1]).float()
        dweight = torch.zeros(ctx.rows, grad.shape[-1], dtype=torch.float32)
        if ctx.assign:  # the bug: an id that occurs twice keeps one of its rows
            dweight[flat_ids] = flat
        else:
            dweight.index_add_(0, flat_ids, flat)
        return None, dweight.to(grad.dtype), None


def embedding(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return _Embedding.apply(ids, weight, False)


def embedding_torch(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Hard negative: PyTorch's own, whose CPU backward adds 16-bit rows in 16 bits."""
    return F.embedding(ids, weight)


def embedding_scatter_assign(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return _Embedding.apply(ids, weight, True)


# ---- max-pool ---------------------------------------------------------------------------------------------


class _MaxPool(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, kernel_size: int, stride: int, routing: str) -> torch.Tensor:
        windows = x.unfold(-1, kernel_size, stride)
        values, first = windows.max(dim=-1)
        if routing == "last":  # the last of equal maxima: as correct as the first
            last = kernel_size - 1 - windows.flip(-1).float().argmax(dim=-1)
            first = last
        starts = torch.arange(windows.shape[-2]) * (1 if routing == "no_stride" else stride)
        ctx.save_for_backward(starts + first)
        ctx.length = x.shape[-1]
        return values

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        (index,) = ctx.saved_tensors
        dx = torch.zeros(*grad.shape[:-1], ctx.length, dtype=torch.float32)
        dx.scatter_add_(-1, index.expand_as(grad).contiguous(), grad.float())
        return dx.to(grad.dtype), None, None, None


def max_pool(x: torch.Tensor, kernel_size: int = 2, stride: int = 2) -> torch.Tensor:
    return _MaxPool.apply(x, kernel_size, stride, "first")


def max_pool_last_of_ties(x: torch.Tensor, kernel_size: int = 2, stride: int = 2) -> torch.Tensor:
    return _MaxPool.apply(x, kernel_size, stride, "last")


def max_pool_torch(x: torch.Tensor, kernel_size: int = 2, stride: int = 2) -> torch.Tensor:
    """Hard negative: PyTorch's own, whose CPU backward adds overlapping windows' 16-bit terms in 16 bits."""
    return F.max_pool1d(x, kernel_size, stride)


def max_pool_index_without_stride(x: torch.Tensor, kernel_size: int = 2, stride: int = 2) -> torch.Tensor:
    return _MaxPool.apply(x, kernel_size, stride, "no_stride")
