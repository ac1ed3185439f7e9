"""fp64 references, written for clarity. gpuemu-ci calls them on float64 copies of the rounded inputs."""

from __future__ import annotations

import math

import numpy as np

_erf = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    return _erf(np.asarray(x, dtype=np.float64)).astype(np.float64)


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def log_softmax(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def row_sum(x: np.ndarray) -> np.ndarray:
    return x.sum(axis=-1)


def row_mean(x: np.ndarray) -> np.ndarray:
    return x.mean(axis=-1)


def row_max(x: np.ndarray) -> np.ndarray:
    return x.max(axis=-1)


def argmax(x: np.ndarray) -> np.ndarray:
    return x.argmax(axis=-1).astype(np.int64)  # first index of the maximum, like torch.argmax


def cumsum(x: np.ndarray) -> np.ndarray:
    return np.cumsum(x, axis=-1)


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a @ b


def gemv(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    return a @ x


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    return x @ w.T + b


def bias_relu(x: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(x + b, 0.0)


def layernorm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * weight


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact (erf) GELU, torch.nn.functional.gelu's default."""
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def silu_mul(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return gate / (1.0 + np.exp(-gate)) * up


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Half-split rotary embedding on x [T, 2, H]: (x0, x1) -> (x0 cos - x1 sin, x1 cos + x0 sin)."""
    x0, x1 = x[:, 0, :], x[:, 1, :]
    return np.stack([x0 * cos - x1 * sin, x1 * cos + x0 * sin], axis=1)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    return softmax(scores) @ v


def transpose(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.T)


def embedding(ids: np.ndarray, table: np.ndarray) -> np.ndarray:
    return table[ids]
