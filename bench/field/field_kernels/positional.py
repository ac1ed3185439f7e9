"""Position-dependent kernels: rotary embedding with angles computed in the kernel (fp32, with a position
offset as in KV-cached decoding), a fused QK-RMSNorm + RoPE returning concat(q', k') along the heads (the
layout a fused QKV epilogue writes), and an embedding gather."""

from __future__ import annotations

import numpy as np

from field_kernels.gpu import F32, dev, load, round_to, store  # noqa: F401


def _inv_freq(d: int, base: float) -> np.ndarray:
    """base^(-2i/d) in fp32, as HF's rotary embeddings compute it."""
    return F32(1.0) / (F32(base) ** (np.arange(0, d // 2, dtype=F32) * F32(2.0) / F32(d)))


def _rotate_half(x1: np.ndarray, x2: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> tuple[np.ndarray, ...]:
    return x1 * cos - x2 * sin, x2 * cos + x1 * sin


def rope_fp32_angles(x: np.ndarray, position_offset: int = 0, base: float = 10000.0) -> np.ndarray:
    """x [T, H, D] holds tokens at positions offset .. offset + T - 1; GPT-NeoX rotate-half on all of D."""
    X = dev(x)
    t, h, d = x.shape
    half = d // 2
    pos = (np.arange(t, dtype=np.int64) + position_offset).astype(F32)
    ang = pos[:, None] * _inv_freq(d, base)[None, :]  # [T, D/2], fp32
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    base_off = (
        np.arange(t, dtype=np.int64)[:, None] * X.strides[0]
        + np.arange(h, dtype=np.int64)[None, :] * X.strides[1]
    )[:, :, None]
    lanes = np.arange(half, dtype=np.int64)[None, None, :]
    x1 = load(X, base_off + lanes * X.strides[2])
    x2 = load(X, base_off + (lanes + half) * X.strides[2])
    y1, y2 = _rotate_half(x1, x2, cos, sin)
    return store(np.concatenate([y1, y2], axis=-1), x.dtype)


def _rms_normed(t: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """Per-head RMSNorm over D in fp32 (Qwen3 / OLMo2 QK-norm); t [T, H, D] float32, w [D] float32."""
    ms = (t * t).sum(axis=-1, dtype=F32) / F32(t.shape[-1])
    return t * (F32(1.0) / np.sqrt(ms + F32(eps)))[..., None] * w


def qk_norm_rope_concat(
    q: np.ndarray,
    k: np.ndarray,
    q_weight: np.ndarray,
    k_weight: np.ndarray,
    cos: np.ndarray,
    sin: np.ndarray,
    eps: float = 1e-6,
) -> np.ndarray:
    """q [T, HQ, D], k [T, HK, D], norm weights [D], cos/sin [T, D] (first D/2 columns are the per-position
    tables) -> concat(rope(norm(q)), rope(norm(k))) along the heads: [T, HQ + HK, D]."""
    half = q.shape[-1] // 2
    c, s = cos.astype(F32)[:, None, :half], sin.astype(F32)[:, None, :half]
    qn = _rms_normed(q.astype(F32), q_weight.astype(F32), eps)
    kn = _rms_normed(k.astype(F32), k_weight.astype(F32), eps)
    q1, q2 = _rotate_half(qn[..., :half], qn[..., half : 2 * half], c, s)
    k1, k2 = _rotate_half(kn[..., :half], kn[..., half : 2 * half], c, s)
    out = np.concatenate(
        [
            np.concatenate([q1, q2, qn[..., 2 * half :]], axis=-1),
            np.concatenate([k1, k2, kn[..., 2 * half :]], axis=-1),
        ],
        axis=1,
    )
    return store(out, q.dtype)


def embedding(table: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """table [V, D], ids [T] -> table[ids] [T, D], row offsets id * row_stride in 64-bit arithmetic."""
    tab, idx = dev(table), dev(ids)
    rows = load(idx, np.arange(ids.shape[0], dtype=np.int64) * idx.strides[0]).astype(np.int64)
    cols = np.arange(table.shape[1], dtype=np.int64)
    offsets = rows[:, None] * tab.strides[0] + cols[None, :] * tab.strides[1]
    return store(load(tab, offsets), table.dtype)
