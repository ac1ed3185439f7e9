"""The fp64 reference of kernels/gelu.cu, written from the formula: GELU's tanh approximation."""

from __future__ import annotations

import numpy as np


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))
