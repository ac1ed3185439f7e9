"""fp64 references: plain NumPy, written for clarity, called on float64 copies of the rounded inputs."""

from __future__ import annotations

import numpy as np


def softmax(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=-1, keepdims=True)


def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * weight


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a @ b


def cumsum(x: np.ndarray) -> np.ndarray:
    return np.cumsum(x, axis=-1)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    return softmax(scores) @ v
