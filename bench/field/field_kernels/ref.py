"""fp64 NumPy references, written from the math (the model papers and the PyTorch docs), not from any kernel.

gpuemu-ci hands every reference float64 copies of the exact rounded inputs the op received (integer inputs
unchanged), as keyword arguments plus the case's kwargs.
"""

from __future__ import annotations

import numpy as np

SQRT_2_OVER_PI = float(np.sqrt(2.0 / np.pi))


# ---- normalisation -----------------------------------------------------------------------------------
def rms_norm(
    x: np.ndarray, weight: np.ndarray, eps: float = 1e-6, offset: float = 0.0, **_: object
) -> np.ndarray:
    """y = x / sqrt(mean(x^2) + eps) * (offset + w)  (Zhang & Sennrich 2019; Gemma's offset = 1)."""
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(ms + eps) * (offset + weight)


def fused_add_rms_norm(
    x: np.ndarray, residual: np.ndarray, weight: np.ndarray, eps: float = 1e-6, **_: object
) -> tuple[np.ndarray, np.ndarray]:
    """(rms_norm(x + residual), x + residual): the pre-norm residual stream update."""
    h = x + residual
    return rms_norm(h, weight, eps), h


def layer_norm(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float = 1e-5, **_: object
) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) * w + b, biased variance (Ba et al. 2016; torch.nn.LayerNorm)."""
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def group_norm(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray, num_groups: int = 4, eps: float = 1e-5, **_: object
) -> np.ndarray:
    """x [B, C, L]: statistics over each group of C / G channels and all of L (Wu & He 2018); per-channel affine."""
    b, c, length = x.shape
    g = x.reshape(b, num_groups, (c // num_groups) * length)
    mean = g.mean(axis=-1, keepdims=True)
    var = ((g - mean) ** 2).mean(axis=-1, keepdims=True)
    normed = ((g - mean) / np.sqrt(var + eps)).reshape(b, c, length)
    return normed * weight[None, :, None] + bias[None, :, None]


# ---- softmax, losses ----------------------------------------------------------------------------------
def softmax(x: np.ndarray, **_: object) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _logsumexp(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=-1)
    return m + np.log(np.exp(x - m[:, None]).sum(axis=-1))


def cross_entropy(
    logits: np.ndarray,
    target: np.ndarray,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    lse_square_scale: float = 0.0,
    softcap: float = 0.0,
    **_: object,
) -> np.ndarray:
    """Per-token loss (reduction="none") of torch.nn.functional.cross_entropy with label smoothing:
    (1 - s)(lse - x_y) + s(lse - mean_i x_i), plus the PaLM z-loss lse_square_scale * lse^2; rows whose target
    is ignore_index contribute 0. `softcap` > 0: logits -> softcap * tanh(logits / softcap) first (Gemma 2)."""
    x = softcap * np.tanh(logits / softcap) if softcap else logits
    keep = target != ignore_index
    safe = np.where(keep, target, 0).astype(np.int64)
    lse = _logsumexp(x)
    x_y = np.take_along_axis(x, safe[:, None], axis=-1)[:, 0]
    loss = (1.0 - label_smoothing) * (lse - x_y) + label_smoothing * (lse - x.mean(axis=-1))
    loss = loss + lse_square_scale * lse * lse
    return np.where(keep, loss, 0.0)


def linear_cross_entropy(
    x: np.ndarray, weight: np.ndarray, target: np.ndarray, ignore_index: int = -100, **kwargs: object
) -> np.ndarray:
    """cross_entropy(x @ weight.T, target): the lm-head projection fused with the loss."""
    return cross_entropy(x @ weight.T, target, ignore_index=ignore_index, **kwargs)  # type: ignore[arg-type]


# ---- elementwise ------------------------------------------------------------------------------------
def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow for large |x|


def swiglu(a: np.ndarray, b: np.ndarray, **_: object) -> np.ndarray:
    """silu(a) * b (Shazeer 2020)."""
    return a * _sigmoid(a) * b


def geglu_tanh(a: np.ndarray, b: np.ndarray, **_: object) -> np.ndarray:
    """gelu_tanh(a) * b, the tanh approximation 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3)))."""
    return 0.5 * a * (1.0 + np.tanh(SQRT_2_OVER_PI * (a + 0.044715 * a**3))) * b


def relu_squared(x: np.ndarray, **_: object) -> np.ndarray:
    """relu(x)^2 (So et al. 2021, Primer)."""
    return np.maximum(x, 0.0) ** 2


def _rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, rd: int) -> np.ndarray:
    """GPT-NeoX rotate-half RoPE on the first `rd` features; cos/sin broadcast over the heads."""
    half = rd // 2
    x1, x2, rest = x[..., :half], x[..., half:rd], x[..., rd:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], axis=-1)


def rope_tables(
    q: np.ndarray, k: np.ndarray, cos: np.ndarray, sin: np.ndarray, rotary_fraction: float = 1.0, **_: object
) -> tuple[np.ndarray, np.ndarray]:
    """q [B, HQ, S, D], k [B, HK, S, D]; cos/sin [S, D] hold per-position tables of which the first rd / 2
    columns are the frequencies (HF's `emb = cat(freqs, freqs)` layout), rd = the rotary width."""
    d = q.shape[-1]
    rd = max(2, int(d * rotary_fraction) // 2 * 2)  # even, at least 2
    c, s = cos[:, : rd // 2][None, None], sin[:, : rd // 2][None, None]
    return _rotate(q, c, s, rd), _rotate(k, c, s, rd)


# ---- references for the NumPy kernels -----------------------------------------------------------------
def row_sum(x: np.ndarray, **_: object) -> np.ndarray:
    return x.sum(axis=-1)


def row_var(x: np.ndarray, correction: int = 1, **_: object) -> np.ndarray:
    n = x.shape[-1]
    mean = x.mean(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        return ((x - mean) ** 2).sum(axis=-1) / (n - correction)


def row_std(x: np.ndarray, correction: int = 1, **_: object) -> np.ndarray:
    return np.sqrt(row_var(x, correction))


def argmax_rows(logits: np.ndarray, **_: object) -> np.ndarray:
    return np.argmax(logits, axis=-1).astype(np.int64)  # first maximal index, as torch.argmax


def linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, **_: object) -> np.ndarray:
    return x @ weight.T + bias


def conv1d(x: np.ndarray, weight: np.ndarray, stride: int = 1, padding: int = 0, **_: object) -> np.ndarray:
    """Cross-correlation with zero padding (torch.nn.functional.conv1d): y[b,o,l] = sum_c,j w[o,c,j] x[b,c,lS-P+j]."""
    b, c_in, length = x.shape
    kw = weight.shape[-1]
    padded = np.zeros((b, c_in, length + 2 * padding))
    padded[:, :, padding : padding + length] = x
    l_out = (length + 2 * padding - kw) // stride + 1
    cols = np.arange(l_out)[:, None] * stride + np.arange(kw)[None, :]  # [L_out, KW]
    patches = padded[:, :, cols]  # [B, CI, L_out, KW]
    return np.einsum("bclj,ocj->bol", patches, weight)


def max_pool1d(
    x: np.ndarray, kernel_size: int = 2, stride: int = 2, padding: int = 0, **_: object
) -> np.ndarray:
    b, c, length = x.shape
    padded = np.full((b, c, length + 2 * padding), -np.inf)
    padded[:, :, padding : padding + length] = x
    l_out = (length + 2 * padding - kernel_size) // stride + 1
    cols = np.arange(l_out)[:, None] * stride + np.arange(kernel_size)[None, :]
    return padded[:, :, cols].max(axis=-1)


def rope_angles(x: np.ndarray, position_offset: int = 0, base: float = 10000.0, **_: object) -> np.ndarray:
    """RoPE (Su et al. 2021), rotate-half layout: angle(p, i) = p * base^(-2i/D), p = offset + t, exact."""
    t, _, d = x.shape
    half = d // 2
    theta = base ** (-2.0 * np.arange(half) / d)
    ang = (np.arange(t) + position_offset)[:, None] * theta[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    return _rotate(x, cos, sin, 2 * half)


def qk_norm_rope_concat(
    q: np.ndarray,
    k: np.ndarray,
    q_weight: np.ndarray,
    k_weight: np.ndarray,
    cos: np.ndarray,
    sin: np.ndarray,
    eps: float = 1e-6,
    **_: object,
) -> np.ndarray:
    half = q.shape[-1] // 2
    c, s = cos[:, None, :half], sin[:, None, :half]
    qn = rms_norm(q, q_weight, eps)
    kn = rms_norm(k, k_weight, eps)
    return np.concatenate([_rotate(qn, c, s, 2 * half), _rotate(kn, c, s, 2 * half)], axis=1)


def embedding(table: np.ndarray, ids: np.ndarray, **_: object) -> np.ndarray:
    return table[ids]
