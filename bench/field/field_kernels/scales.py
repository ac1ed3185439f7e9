"""`family = "custom"` error scales for the losses, as a user derives them (README: `error_scale` returns (S, n)
and the bound is c * (u_out |r| + sqrt(n) u_acc S + k_f u_acc |r| + eta)).

Per-token cross-entropy is lse - x_y (plus smoothing and z-loss terms): an fp32 kernel errs in proportion to the
magnitudes it combines (|lse|, |x_y|, the smoothing mean), the sum over the V exponentials giving the sqrt(V).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ml_dtypes
import numpy as np

U_FP32 = 2.0**-24
UNIT_ROUNDOFF = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8, "float64": 2.0**-53}


def _dtype_name(a: np.ndarray) -> str:
    return "bfloat16" if a.dtype == np.dtype(ml_dtypes.bfloat16) else a.dtype.name


def _loss_terms(
    x: np.ndarray, target: np.ndarray, kwargs: Mapping[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    """(S per token, max |logit| per token) for per-token cross-entropy on fp64 logits."""
    cap = float(kwargs.get("softcap", 0.0) or 0.0)
    if cap:
        x = cap * np.tanh(x / cap)
    ignore = int(kwargs.get("ignore_index", -100))
    keep = target != ignore
    safe = np.where(keep, target, 0).astype(np.int64)
    m = x.max(axis=-1)
    lse = m + np.log(np.exp(x - m[:, None]).sum(axis=-1))
    x_y = np.abs(np.take_along_axis(x, safe[:, None], axis=-1)[:, 0])
    smoothing = float(kwargs.get("label_smoothing", 0.0))
    z = float(kwargs.get("lse_square_scale", 0.0))
    scale = np.abs(lse) + x_y + smoothing * np.abs(x).mean(axis=-1) + 2.0 * z * lse * lse
    return np.where(keep, scale, 0.0), np.where(keep, np.abs(x).max(axis=-1), 0.0)


def cross_entropy_scale(
    inputs: Mapping[str, np.ndarray],
    reference: np.ndarray,
    dims: Mapping[str, int],
    kwargs: Mapping[str, Any],
) -> tuple[np.ndarray, int]:
    logits = np.asarray(inputs["logits"]).astype(np.float64)
    scale, _ = _loss_terms(logits, np.asarray(inputs["target"]), kwargs)
    return scale, max(logits.shape[-1], 1)


def linear_cross_entropy_scale(
    inputs: Mapping[str, np.ndarray],
    reference: np.ndarray,
    dims: Mapping[str, int],
    kwargs: Mapping[str, Any],
) -> tuple[np.ndarray, int]:
    """The fused lm-head materialises each logits chunk in the input dtype before the fp32 loss, so each logit
    carries one rounding of that dtype (u_in |logit|) on top of the H-long fp32 dot products (|x| |W|^T)."""
    x = np.asarray(inputs["x"])
    u_in = UNIT_ROUNDOFF.get(_dtype_name(x), U_FP32)
    x64 = x.astype(np.float64)
    w64 = np.asarray(inputs["weight"]).astype(np.float64)
    logits = x64 @ w64.T
    scale, max_logit = _loss_terms(logits, np.asarray(inputs["target"]), kwargs)
    v = max(logits.shape[-1], 1)
    h = max(x64.shape[-1], 1)
    dot = (np.abs(x64) @ np.abs(w64).T).max(axis=-1)  # worst |x||w| over the vocabulary
    # Express both extra terms in the hook's units (sqrt(n) * u_acc * S, u_acc = fp32, n = V).
    extra = (2.0 * u_in * max_logit + np.sqrt(h) * U_FP32 * dot) / (np.sqrt(v) * U_FP32)
    return scale + extra, v
