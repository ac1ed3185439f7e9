"""fp64 references written from the math, in torch so that autograd can differentiate them for the backward
check. The forward check calls them with NumPy float64 arrays, the backward check with float64 tensors that
require grad: both are turned into tensors the same way and computed without any rounding of their own."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def _tensor(value: Any) -> torch.Tensor:
    return value if isinstance(value, torch.Tensor) else torch.from_numpy(np.asarray(value))


def swiglu(a: Any, b: Any) -> torch.Tensor:
    a, b = _tensor(a), _tensor(b)
    return a * torch.sigmoid(a) * b


def rmsnorm(x: Any, weight: Any, eps: float = 1e-6) -> torch.Tensor:
    x, weight = _tensor(x), _tensor(weight)
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * weight
