"""Partial rotary embedding: the first RD of D features of x [B, S, H, D] are rotated in halves (`rotate_half`)
with cos/sin tables [CB, S, RD] shared by every head (CB = 1 broadcasts over the batch); the rest pass through.
fp32 arithmetic, one rounding at the store."""

from __future__ import annotations

import numpy as np


def partial_rotary(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    rd = cos.shape[-1]
    half = rd // 2
    xf = x.astype(np.float32)
    c = cos.astype(np.float32)[:, :, None, :]
    s = sin.astype(np.float32)[:, :, None, :]
    rot = xf[..., :rd]
    rotated_half = np.concatenate([-rot[..., half:], rot[..., :half]], axis=-1)
    out = xf.copy()
    out[..., :rd] = rot * c + rotated_half * s
    return out.astype(x.dtype)
