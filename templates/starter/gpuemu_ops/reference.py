"""fp64 references: plain NumPy, written for clarity. gpuemu-ci calls them on float64 copies of
exactly the rounded inputs the op received."""

from __future__ import annotations

import numpy as np


def silu(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        y: np.ndarray = x / (1.0 + np.exp(-x))
    return y
