"""The fp64 reference of kernels/gelu.hip, the same formula as kernels/gelu_math.h: GELU's tanh approximation."""

from __future__ import annotations

import numpy as np


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    c = np.sqrt(2.0 / np.pi)
    k = 0.044715
    return 0.5 * x * (1.0 + np.tanh(c * (x + k * x**3)))
