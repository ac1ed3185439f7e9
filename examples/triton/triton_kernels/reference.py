"""The fp64 reference, written from the math in torch so that autograd differentiates it for the backward
check (called with NumPy float64 arrays for the forward, with float64 tensors for the backward)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def rmsnorm(x: Any, weight: Any, eps: float = 1e-6) -> torch.Tensor:
    x = x if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x))
    weight = weight if isinstance(weight, torch.Tensor) else torch.from_numpy(np.asarray(weight))
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * weight
