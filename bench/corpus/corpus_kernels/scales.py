"""`family = "custom"` error-scale hooks: per output element, the magnitude S that rounding errors scale with,
and the accumulation length n. gpuemu-ci allows c * (u_out |r| + sqrt(n) u_acc S + k_f u_acc |r| + eta)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np


def log_softmax_scale(
    inputs: Mapping[str, np.ndarray],
    reference: np.ndarray,
    dims: Mapping[str, int],
    kwargs: Mapping[str, object],
) -> tuple[np.ndarray, int]:
    """y = (x - m) - log(sum exp(x - m)): the subtraction errs by u |x - m|, the sum by sqrt(n) u relative
    (1 in absolute terms after the log), and the log itself by u |log sum|."""
    x = np.asarray(next(iter(inputs.values())), dtype=np.float64)
    finite = np.where(np.isfinite(x), x, 0.0)
    shifted = np.abs(finite - finite.max(axis=-1, keepdims=True))
    log_sum = np.abs(np.asarray(reference, dtype=np.float64) - (finite - finite.max(axis=-1, keepdims=True)))
    n = x.shape[-1] if x.ndim else 1
    return shifted + log_sum + 1.0, n
