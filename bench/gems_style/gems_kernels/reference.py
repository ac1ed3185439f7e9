"""float64 references for the FlagGems-style suite, written from the math in torch so that autograd
differentiates them for the backward check (NumPy float64 arrays for the forward, float64 tensors for the
backward)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch


def _t(x: Any) -> torch.Tensor:
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x))


def softmax(x: Any) -> torch.Tensor:
    x = _t(x)
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


def layer_norm(x: Any, weight: Any, bias: Any, eps: float = 1e-5) -> torch.Tensor:
    x = _t(x)
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * _t(weight) + _t(bias)


def bmm(a: Any, b: Any) -> torch.Tensor:
    return torch.matmul(_t(a), _t(b))


def attention(q: Any, k: Any, v: Any) -> torch.Tensor:
    q, k, v = _t(q), _t(k), _t(v)
    scores = q @ k.transpose(-1, -2) / math.sqrt(max(q.shape[-1], 1))
    return softmax(scores) @ v
