"""Kernels of training and inference stacks whose bugs and whose legitimate rounding the quick suite must both
get right (issue #17): long-row reductions, a chunked cross-entropy over a vocabulary, a row std, a top-1
router over logits it computes itself, a 1-D convolution with a halo, rotary embeddings with angles computed
in the kernel, a fused q/k RMSNorm + RoPE that returns concat(q', k'), group norm, and RMSNorm / softmax
variants.

Each bug has the trigger the issue names: a row longer than one 4096 block, a vocabulary longer than one
16384 chunk, rows of zeros, rows below exp's underflow, a row-padded slice, L past the 128 tile with a kernel
width above 1, 16-bit inputs, and the rest.
"""

from __future__ import annotations

import numpy as np

from corpus_kernels.tiles import F32, as_rows, load_cols, read_as_contiguous, store

# --- long rows ----------------------------------------------------------------------------------------------
LONG_BLOCK = 4096


def row_sum_long(x: np.ndarray) -> np.ndarray:
    """Control: 4096-wide blocks; each block's fp32 sum is added to the row's accumulator."""
    rows = as_rows(x)
    acc = np.zeros(rows.shape[0], dtype=F32)
    for start in range(0, rows.shape[1], LONG_BLOCK):
        acc += rows[:, start : start + LONG_BLOCK].astype(F32).sum(axis=1, dtype=F32)
    return store(acc, x.dtype)


def row_sum_long_acc_assign(x: np.ndarray) -> np.ndarray:
    """Bug (acc = instead of acc +=): only the last 4096 block of a row survives (N > 4096)."""
    rows = as_rows(x)
    acc = np.zeros(rows.shape[0], dtype=F32)
    for start in range(0, rows.shape[1], LONG_BLOCK):
        acc = rows[:, start : start + LONG_BLOCK].astype(F32).sum(axis=1, dtype=F32)
    return store(acc, x.dtype)


# --- cross-entropy over a vocabulary in 16384-logit chunks ----------------------------------------------------
VOCAB_CHUNK = 16384


def _row_losses(
    logits: np.ndarray, target: np.ndarray, ignore_index: int, accumulate: bool, chunk_size: int = VOCAB_CHUNK
) -> np.ndarray:
    """Each row's loss in fp32 (0 where the target is ignored), the log-sum-exp over `chunk_size` chunks."""
    rows = as_rows(logits)
    running_max = np.full(rows.shape[0], -np.inf, dtype=F32)
    running_sum = np.zeros(rows.shape[0], dtype=F32)
    for start in range(0, rows.shape[1], chunk_size):
        chunk = rows[:, start : start + chunk_size].astype(F32)
        chunk_max = chunk.max(axis=1)
        new_max = np.maximum(running_max, chunk_max) if accumulate else chunk_max
        chunk_sum = np.exp(chunk - new_max[:, None]).sum(axis=1, dtype=F32)
        # The bug: without `accumulate` the chunk's sum replaces the row's.
        running_sum = running_sum * np.exp(running_max - new_max) + chunk_sum if accumulate else chunk_sum
        running_max = new_max
    lse = running_max + np.log(running_sum)
    keep = target != ignore_index
    picked = rows[np.arange(rows.shape[0]), np.where(keep, target, 0)].astype(F32)
    return np.where(keep, lse - picked, F32(0.0))


def cross_entropy(logits: np.ndarray, target: np.ndarray, ignore_index: int = -100) -> np.ndarray:
    """Control: an online log-sum-exp over 16384-logit chunks; loss = lse - logit[target] per row (fp32);
    rows whose target is `ignore_index` get 0. With logits near 1e10 the loss is 0 in any fp32 kernel."""
    with np.errstate(invalid="ignore", over="ignore"):
        return store(_row_losses(logits, target, ignore_index, accumulate=True), logits.dtype)


def cross_entropy_last_chunk(logits: np.ndarray, target: np.ndarray, ignore_index: int = -100) -> np.ndarray:
    """Bug (vocabulary loop): the log-sum-exp keeps only the last chunk (V > 16384)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return store(_row_losses(logits, target, ignore_index, accumulate=False), logits.dtype)


def _linear_losses(
    x: np.ndarray, weight: np.ndarray, target: np.ndarray, ignore_index: int, accumulate: bool
) -> np.ndarray:
    """Each row's loss of cross_entropy(x @ weight.T) in fp32, the logits made one 16384-row chunk of the
    weight at a time (never the whole [BT, V] matrix) and folded into an online log-sum-exp."""
    rows = as_rows(x).astype(F32)
    running_max = np.full(rows.shape[0], -np.inf, dtype=F32)
    running_sum = np.zeros(rows.shape[0], dtype=F32)
    keep = target != ignore_index
    safe = np.where(keep, target, 0)
    picked = np.zeros(rows.shape[0], dtype=F32)
    for start in range(0, weight.shape[0], VOCAB_CHUNK):
        chunk = np.asarray(weight[start : start + VOCAB_CHUNK], dtype=F32)
        logits = rows @ chunk.T
        inside = (safe >= start) & (safe < start + chunk.shape[0])
        picked = np.where(
            inside, logits[np.arange(rows.shape[0]), np.clip(safe - start, 0, chunk.shape[0] - 1)], picked
        )
        chunk_max = logits.max(axis=1)
        new_max = np.maximum(running_max, chunk_max) if accumulate else chunk_max
        chunk_sum = np.exp(logits - new_max[:, None]).sum(axis=1, dtype=F32)
        # The bug: without `accumulate` the chunk's sum replaces the row's.
        running_sum = running_sum * np.exp(running_max - new_max) + chunk_sum if accumulate else chunk_sum
        running_max = new_max
    return np.where(keep, running_max + np.log(running_sum) - picked, F32(0.0))


def linear_cross_entropy_sum(
    x: np.ndarray, weight: np.ndarray, target: np.ndarray, ignore_index: int = -100
) -> np.ndarray:
    """Control (reduction="sum"): the lm-head projection fused with the loss over 16384-row chunks of the
    weight, the rows' losses summed in fp32 into one scalar. The vocabulary is a dim no output keeps, and no
    input's last: only a case with V > 16384 runs a second chunk."""
    with np.errstate(invalid="ignore", over="ignore"):
        return store(
            np.asarray(_linear_losses(x, weight, target, ignore_index, True).sum(dtype=F32)), x.dtype
        )


def linear_cross_entropy_sum_last_chunk(
    x: np.ndarray, weight: np.ndarray, target: np.ndarray, ignore_index: int = -100
) -> np.ndarray:
    """Bug (vocabulary loop, issue #44): each row's log-sum-exp keeps only the last chunk of the weight
    (V > 16384: the quick suite must draw a reduced-away dim past its first chunk)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return store(
            np.asarray(_linear_losses(x, weight, target, ignore_index, False).sum(dtype=F32)), x.dtype
        )


def cross_entropy_bf16_path_last_chunk(
    logits: np.ndarray, target: np.ndarray, ignore_index: int = -100
) -> np.ndarray:
    """Bug (a dtype's own code path): the bfloat16 kernel, tuned separately with 32768-logit chunks, keeps only
    the last chunk's log-sum-exp; the float32 and float16 paths are right. Visible in bfloat16 rows with
    V > 32768 only: the quick suite must draw the declared max in every dtype row, not in the first alone."""
    bf16 = logits.dtype.name == "bfloat16"
    with np.errstate(invalid="ignore", over="ignore"):
        losses = _row_losses(logits, target, ignore_index, accumulate=not bf16, chunk_size=2 * VOCAB_CHUNK)
        return store(losses, logits.dtype)


# --- row std ----------------------------------------------------------------------------------------------
STD_BLOCK = 256


def _blocked_sum(rows: np.ndarray, values: np.ndarray | None = None) -> np.ndarray:
    data = rows if values is None else values
    acc = np.zeros(rows.shape[0], dtype=F32)
    for start in range(0, rows.shape[1], STD_BLOCK):
        acc += data[:, start : start + STD_BLOCK].astype(F32).sum(axis=1, dtype=F32)
    return acc


def row_std(x: np.ndarray, correction: int = 1) -> np.ndarray:
    """Control: two passes over 256-wide blocks, mean then the centred sum of squares, in fp32. The std of a
    constant row is the square root of the rounding left in the centred values (not 0)."""
    rows = as_rows(x).astype(F32)
    n = rows.shape[1]
    mean = _blocked_sum(rows) / F32(max(n, 1))
    centred = rows - mean[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        var = _blocked_sum(rows, centred * centred) / F32(n - correction)
    return store(np.sqrt(var), x.dtype)


def row_std_one_pass(x: np.ndarray, correction: int = 1) -> np.ndarray:
    """Bug (one-pass variance): E[x^2] - E[x]^2, clamped at 0 (|mean| >> std)."""
    rows = as_rows(x).astype(F32)
    n = rows.shape[1]
    mean = _blocked_sum(rows) / F32(max(n, 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        var = (_blocked_sum(rows, rows * rows) - F32(n) * mean * mean) / F32(n - correction)
    return store(np.sqrt(np.maximum(var, F32(0.0))), x.dtype)


# --- top-1 router ------------------------------------------------------------------------------------------
ROUTER_BLOCK_K = 64
EXPERT_BLOCK = 8


def _router_scores(x: np.ndarray, w: np.ndarray, split: bool) -> np.ndarray:
    xf, wf = x.astype(F32), w.astype(F32)
    k = xf.shape[1]
    if split:  # split-K: two halves, each accumulated, then added
        half = k // 2
        return (xf[:, :half] @ wf[:, :half].T).astype(F32) + (xf[:, half:] @ wf[:, half:].T).astype(F32)
    scores = np.zeros((xf.shape[0], wf.shape[0]), dtype=F32)
    for k0 in range(0, k, ROUTER_BLOCK_K):
        scores += xf[:, k0 : k0 + ROUTER_BLOCK_K] @ wf[:, k0 : k0 + ROUTER_BLOCK_K].T
    return scores


def router_top1(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Control: logits = x @ w.T in fp32 (64-wide K blocks), the first index of the largest. Where two experts'
    fp64 logits are within rounding of each other it may pick the other one: the argmax rule allows that."""
    return np.argmax(_router_scores(x, w, split=False), axis=1).astype(np.int64)


def router_top1_split_k(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Hard negative: split-K logits (another rounding, other near-tie picks)."""
    return np.argmax(_router_scores(x, w, split=True), axis=1).astype(np.int64)


def router_top1_drops_tail(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Bug (tail dropped): experts are scored in blocks of 8 and the loop runs E // 8 times, so the experts of
    a last partial block are never candidates (E % 8 != 0; wrong wherever the best expert is one of them)."""
    scores = _router_scores(x, w, split=False)
    full_blocks = (scores.shape[1] // EXPERT_BLOCK) * EXPERT_BLOCK
    if full_blocks == 0:
        return np.zeros(scores.shape[0], dtype=np.int64)
    return np.argmax(scores[:, :full_blocks], axis=1).astype(np.int64)


# --- conv1d with a halo ------------------------------------------------------------------------------------
CONV_TILE = 128


def _conv1d(
    x: np.ndarray, w: np.ndarray, stride: int, padding: int, halo: bool, tile: int = CONV_TILE
) -> np.ndarray:
    b, c_in, length = x.shape
    c_out, _, kw = w.shape
    out_len = (length + 2 * padding - kw) // stride + 1
    padded = np.zeros((b, c_in, length + 2 * padding + tile * stride + kw), dtype=F32)
    padded[:, :, padding : padding + length] = x.astype(F32)
    wf = w.astype(F32)
    out = np.zeros((b, c_out, out_len), dtype=F32)
    for t0 in range(0, out_len, tile):
        positions = np.arange(t0, min(t0 + tile, out_len))
        start = t0 * stride
        loaded = (tile - 1) * stride + kw if halo else tile * stride
        window = np.zeros((b, c_in, tile * stride + kw), dtype=F32)
        window[:, :, :loaded] = padded[:, :, start : start + loaded]  # the tile's input (+ its halo)
        for j in range(kw):
            taps = window[:, :, (positions - t0) * stride + j]  # [B, CI, P]
            out[:, :, positions] += np.einsum("bcp,oc->bop", taps, wf[:, :, j], dtype=F32)
    return out


def conv1d(x: np.ndarray, w: np.ndarray, stride: int = 1, padding: int = 0) -> np.ndarray:
    """Control: 128-position output tiles, each loading its input window plus the KW - 1 halo; fp32."""
    return store(_conv1d(x, w, stride, padding, halo=True), x.dtype)


def conv1d_no_halo(x: np.ndarray, w: np.ndarray, stride: int = 1, padding: int = 0) -> np.ndarray:
    """Bug (no halo): each tile loads KW - 1 inputs short of its last outputs' taps: wrong when an output tile
    is full (LO > 128) and KW > 1."""
    return store(_conv1d(x, w, stride, padding, halo=False), x.dtype)


# --- rotary embedding with angles computed in the kernel ---------------------------------------------------
def _angles(t: int, d: int, position_offset: int, base: float, dtype: np.dtype) -> np.ndarray:
    """HF's definition: inv_freq = 1 / base^(2i/D) and angle = position * inv_freq, both in `dtype`."""
    exponents = np.arange(0, d - d % 2, 2, dtype=F32) / F32(d)
    inv_freq = (F32(1.0) / np.power(F32(base), exponents)).astype(dtype)
    positions = (np.arange(t) + position_offset).astype(dtype)
    return (positions[:, None] * inv_freq[None, :]).astype(F32)


def _rotate_half(x: np.ndarray, angles: np.ndarray) -> np.ndarray:
    half = angles.shape[-1]
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    xf = x.astype(F32)
    out = xf.copy()
    x1, x2 = xf[..., :half], xf[..., half : 2 * half]
    out[..., :half] = x1 * cos - x2 * sin
    out[..., half : 2 * half] = x2 * cos + x1 * sin
    return out


def rope_angles(x: np.ndarray, position_offset: int = 0, base: float = 10000.0) -> np.ndarray:
    """Control: x [T, H, D]; angles of position (offset + t) computed in the kernel in fp32, then rotate-half.
    At offset 2048 and base 5e5 the fp32 angle alone errs by u |angle|."""
    t, _, d = x.shape
    return store(_rotate_half(x, _angles(t, d, position_offset, base, F32)), x.dtype)


def rope_angles_offset_ignored(x: np.ndarray, position_offset: int = 0, base: float = 10000.0) -> np.ndarray:
    """Bug (ignored kwarg): positions start at 0 whatever `position_offset` says."""
    t, _, d = x.shape
    return store(_rotate_half(x, _angles(t, d, 0, base, F32)), x.dtype)


def rope_angles_input_dtype(x: np.ndarray, position_offset: int = 0, base: float = 10000.0) -> np.ndarray:
    """Bug (angles in low precision): positions and frequencies in the input dtype (16-bit positions past 256
    are rounded)."""
    t, _, d = x.shape
    return store(_rotate_half(x, _angles(t, d, position_offset, base, x.dtype)), x.dtype)


# --- fused q/k RMSNorm + RoPE, returning concat(q', k') ------------------------------------------------------
def _rms(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    xf = x.astype(F32)
    mean_sq = (xf * xf).sum(axis=-1, keepdims=True, dtype=F32) / F32(x.shape[-1])
    return xf / np.sqrt(mean_sq + F32(eps)) * weight.astype(F32)


def _rope_tables(xn: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    half = xn.shape[-1] // 2
    c, s = cos.astype(F32)[:, None, :half], sin.astype(F32)[:, None, :half]
    out = xn.copy()
    x1, x2 = xn[..., :half], xn[..., half : 2 * half]
    out[..., :half] = x1 * c - x2 * s
    out[..., half : 2 * half] = x2 * c + x1 * s
    return out


def qk_norm_rope(
    q: np.ndarray,
    k: np.ndarray,
    q_weight: np.ndarray,
    k_weight: np.ndarray,
    cos: np.ndarray,
    sin: np.ndarray,
    eps: float = 1e-6,
) -> np.ndarray:
    """Control: RMSNorm of q and k heads (their own weights), then rotate-half with the cos/sin tables; returns
    concat(q', k') along the heads: an output shaped like no input."""
    qn = _rope_tables(_rms(q, q_weight, eps), cos, sin)
    kn = _rope_tables(_rms(k, k_weight, eps), cos, sin)
    return store(np.concatenate([qn, kn], axis=1), q.dtype)


def qk_norm_rope_k_with_q_weight(
    q: np.ndarray,
    k: np.ndarray,
    q_weight: np.ndarray,
    k_weight: np.ndarray,
    cos: np.ndarray,
    sin: np.ndarray,
    eps: float = 1e-6,
) -> np.ndarray:
    """Bug (wrong operand): k normalised with q's weight (a copy-paste)."""
    qn = _rope_tables(_rms(q, q_weight, eps), cos, sin)
    kn = _rope_tables(_rms(k, q_weight, eps), cos, sin)
    return store(np.concatenate([qn, kn], axis=1), q.dtype)


# --- group norm ---------------------------------------------------------------------------------------------
GROUP_BLOCK = 1024


def _group_norm(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray, num_groups: int, eps: float, by_group: bool
) -> np.ndarray:
    n, c, length = x.shape
    groups = x.reshape(n, num_groups, -1).astype(F32)
    count = F32(max(groups.shape[-1], 1))
    total = np.zeros((n, num_groups), dtype=F32)
    for start in range(0, groups.shape[-1], GROUP_BLOCK):
        total += groups[..., start : start + GROUP_BLOCK].sum(axis=-1, dtype=F32)
    mean = total / count
    squares = np.zeros((n, num_groups), dtype=F32)
    for start in range(0, groups.shape[-1], GROUP_BLOCK):
        centred = groups[..., start : start + GROUP_BLOCK] - mean[..., None]
        squares += (centred * centred).sum(axis=-1, dtype=F32)
    rstd = F32(1.0) / np.sqrt(squares / count + F32(eps))
    normed = ((groups - mean[..., None]) * rstd[..., None]).reshape(n, c, length)
    if by_group:  # the bug: channel c takes the weight and bias of its group's index
        index = np.arange(c) // (c // num_groups)
        w, b = weight.astype(F32)[index], bias.astype(F32)[index]
    else:
        w, b = weight.astype(F32), bias.astype(F32)
    return store(normed * w[None, :, None] + b[None, :, None], x.dtype)


def group_norm(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray, num_groups: int, eps: float = 1e-5
) -> np.ndarray:
    """Control: statistics per (sample, group) over 1024-wide chunks in fp32, two passes, per-channel affine."""
    return _group_norm(x, weight, bias, num_groups, eps, by_group=False)


def group_norm_one_pass(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray, num_groups: int, eps: float = 1e-5
) -> np.ndarray:
    """Bug (one-pass variance): per group E[x^2] - E[x]^2 in fp32, which cancels when a group's |mean| >> std
    (from |mean|/std of about 300)."""
    n, c, length = x.shape
    groups = x.reshape(n, num_groups, -1).astype(F32)
    count = F32(max(groups.shape[-1], 1))
    total = np.zeros((n, num_groups), dtype=F32)
    total_sq = np.zeros((n, num_groups), dtype=F32)
    for start in range(0, groups.shape[-1], GROUP_BLOCK):
        block = groups[..., start : start + GROUP_BLOCK]
        total += block.sum(axis=-1, dtype=F32)
        total_sq += (block * block).sum(axis=-1, dtype=F32)
    mean = total / count
    var = np.maximum(total_sq / count - mean * mean, F32(0.0))
    rstd = F32(1.0) / np.sqrt(var + F32(eps))
    normed = ((groups - mean[..., None]) * rstd[..., None]).reshape(n, c, length)
    return store(normed * weight.astype(F32)[None, :, None] + bias.astype(F32)[None, :, None], x.dtype)


def group_norm_affine_by_group(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray, num_groups: int, eps: float = 1e-5
) -> np.ndarray:
    """Bug (wrong affine index): the weight and bias indexed by group instead of by channel."""
    return _group_norm(x, weight, bias, num_groups, eps, by_group=True)


# --- RMSNorm and softmax variants ------------------------------------------------------------------------
def rmsnorm_no_eps(x: np.ndarray, weight: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """Bug (eps ignored): rsqrt(mean(x^2)) without eps: a row of zeros becomes 0 * inf = NaN."""
    rows = as_rows(x).astype(F32)
    mean_sq = (rows * rows).sum(axis=1, dtype=F32) / F32(max(rows.shape[1], 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = rows / np.sqrt(mean_sq)[:, None] * weight.astype(F32)
    return store(out, x.dtype).reshape(x.shape)


def rmsnorm_squares_in_input_dtype(x: np.ndarray, weight: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """Bug (dtype-borne): the squares and their sum kept in the input dtype (no upcast): fp16 overflows past
    |x| = 256 and bf16 loses the sum's low bits; fp32 inputs are right."""
    rows = as_rows(x)
    with np.errstate(over="ignore", invalid="ignore"):
        squares = (rows * rows).astype(x.dtype)
        mean_sq = (
            squares.sum(axis=1, dtype=x.dtype) / np.asarray(max(rows.shape[1], 1), dtype=x.dtype)
        ).astype(F32)
        out = rows.astype(F32) / np.sqrt(mean_sq + F32(eps))[:, None] * weight.astype(F32)
    return store(out, x.dtype).reshape(x.shape)


def softmax_max_init_zero(x: np.ndarray) -> np.ndarray:
    """Bug (max initialised to 0): the running max starts at 0, not -inf: rows whose logits all lie below exp's
    underflow sum to 0 and divide 0 by 0."""
    rows = as_rows(x)
    running_max = np.zeros(rows.shape[0], dtype=F32)
    running_sum = np.zeros(rows.shape[0], dtype=F32)
    for start in range(0, rows.shape[1], 64):
        tile, _ = load_cols(rows, start, 64, -np.inf)
        new_max = np.maximum(running_max, tile.max(axis=1))
        running_sum = running_sum * np.exp(running_max - new_max) + np.exp(tile - new_max[:, None]).sum(
            axis=1, dtype=F32
        )
        running_max = new_max
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.exp(rows.astype(F32) - running_max[:, None]) / running_sum[:, None]
    return store(out, x.dtype).reshape(x.shape)


def softmax_row_stride_n(x: np.ndarray) -> np.ndarray:
    """Bug (row stride taken as N): the launcher copies inputs whose last stride is not 1 (Liger's guard), then
    the kernel steps rows by N from the data pointer: a row-padded slice x[:, :N] reads the padding."""
    from corpus_kernels.softmax import softmax_online

    if x.ndim >= 2 and x.strides[-1] != x.itemsize:
        x = np.ascontiguousarray(x)
    return softmax_online(read_as_contiguous(x))


# --- hard negatives: correct kernels that sum, split or block differently --------------------------------------
def row_sum_long_pairwise(x: np.ndarray) -> np.ndarray:
    """Hard negative: 1024-wide block sums combined by a pairwise tree."""
    rows = as_rows(x)
    partials = [
        rows[:, start : start + 1024].astype(F32).sum(axis=1, dtype=F32)
        for start in range(0, rows.shape[1], 1024)
    ] or [np.zeros(rows.shape[0], dtype=F32)]
    while len(partials) > 1:
        partials = [
            partials[i] + partials[i + 1] if i + 1 < len(partials) else partials[i]
            for i in range(0, len(partials), 2)
        ]
    return store(partials[0], x.dtype)


def cross_entropy_two_pass(logits: np.ndarray, target: np.ndarray, ignore_index: int = -100) -> np.ndarray:
    """Hard negative: the row max first, then the sum of exponentials, over 4096-logit chunks."""
    rows = as_rows(logits)
    row_max = np.full(rows.shape[0], -np.inf, dtype=F32)
    for start in range(0, rows.shape[1], 4096):
        row_max = np.maximum(row_max, rows[:, start : start + 4096].astype(F32).max(axis=1))
    total = np.zeros(rows.shape[0], dtype=F32)
    with np.errstate(invalid="ignore", over="ignore"):
        for start in range(0, rows.shape[1], 4096):
            total += np.exp(rows[:, start : start + 4096].astype(F32) - row_max[:, None]).sum(
                axis=1, dtype=F32
            )
        lse = row_max + np.log(total)
        keep = target != ignore_index
        picked = rows[np.arange(rows.shape[0]), np.where(keep, target, 0)].astype(F32)
        return store(np.where(keep, lse - picked, F32(0.0)), logits.dtype)


def row_std_welford(x: np.ndarray, correction: int = 1) -> np.ndarray:
    """Hard negative: one pass, per-block (count, mean, M2) merged with Chan's update."""
    rows = as_rows(x).astype(F32)
    count = np.zeros(rows.shape[0], dtype=F32)
    mean = np.zeros(rows.shape[0], dtype=F32)
    m2 = np.zeros(rows.shape[0], dtype=F32)
    for start in range(0, rows.shape[1], STD_BLOCK):
        block = rows[:, start : start + STD_BLOCK]
        block_n = F32(block.shape[1])
        block_mean = block.sum(axis=1, dtype=F32) / block_n
        block_m2 = ((block - block_mean[:, None]) ** 2).sum(axis=1, dtype=F32)
        total = count + block_n
        delta = block_mean - mean
        mean = mean + delta * (block_n / total)
        m2 = m2 + block_m2 + delta * delta * (count * block_n / total)
        count = total
    with np.errstate(divide="ignore", invalid="ignore"):
        return store(np.sqrt(m2 / (count - F32(correction))), x.dtype)


def conv1d_tile_64(x: np.ndarray, w: np.ndarray, stride: int = 1, padding: int = 0) -> np.ndarray:
    """Hard negative: 64-position output tiles (a different split of the same sums)."""
    return store(_conv1d(x, w, stride, padding, halo=True, tile=64), x.dtype)


def rope_angles_split_offset(x: np.ndarray, position_offset: int = 0, base: float = 10000.0) -> np.ndarray:
    """Hard negative: angle = offset * inv_freq + t * inv_freq (two fp32 products and a sum: another rounding
    of the same angles, as kernels that add a cache offset to per-token angles do)."""
    t, _, d = x.shape
    exponents = np.arange(0, d - d % 2, 2, dtype=F32) / F32(d)
    inv_freq = (F32(1.0) / np.power(F32(base), exponents)).astype(F32)
    base_angle = F32(position_offset) * inv_freq
    angles = (base_angle[None, :] + np.arange(t, dtype=F32)[:, None] * inv_freq[None, :]).astype(F32)
    return store(_rotate_half(x, angles), x.dtype)


def qk_norm_rope_blocked(
    q: np.ndarray,
    k: np.ndarray,
    q_weight: np.ndarray,
    k_weight: np.ndarray,
    cos: np.ndarray,
    sin: np.ndarray,
    eps: float = 1e-6,
) -> np.ndarray:
    """Hard negative: the mean square accumulated over 32-wide blocks."""

    def rms(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        xf = x.astype(F32)
        acc = np.zeros(x.shape[:-1], dtype=F32)
        for start in range(0, x.shape[-1], 32):
            part = xf[..., start : start + 32]
            acc += (part * part).sum(axis=-1, dtype=F32)
        return xf / np.sqrt(acc[..., None] / F32(x.shape[-1]) + F32(eps)) * weight.astype(F32)

    qn = _rope_tables(rms(q, q_weight), cos, sin)
    kn = _rope_tables(rms(k, k_weight), cos, sin)
    return store(np.concatenate([qn, kn], axis=1), q.dtype)


def group_norm_welford(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray, num_groups: int, eps: float = 1e-5
) -> np.ndarray:
    """Hard negative: per-group statistics in one pass (Welford per 1024-wide chunk, merged)."""
    n, c, length = x.shape
    groups = x.reshape(n, num_groups, -1).astype(F32)
    count = np.zeros((n, num_groups), dtype=F32)
    mean = np.zeros((n, num_groups), dtype=F32)
    m2 = np.zeros((n, num_groups), dtype=F32)
    for start in range(0, groups.shape[-1], GROUP_BLOCK):
        chunk = groups[..., start : start + GROUP_BLOCK]
        chunk_n = F32(chunk.shape[-1])
        chunk_mean = chunk.sum(axis=-1, dtype=F32) / chunk_n
        chunk_m2 = ((chunk - chunk_mean[..., None]) ** 2).sum(axis=-1, dtype=F32)
        total = count + chunk_n
        delta = chunk_mean - mean
        mean = mean + delta * (chunk_n / total)
        m2 = m2 + chunk_m2 + delta * delta * (count * chunk_n / total)
        count = total
    rstd = F32(1.0) / np.sqrt(m2 / np.maximum(count, F32(1)) + F32(eps))
    normed = ((groups - mean[..., None]) * rstd[..., None]).reshape(n, c, length)
    return store(normed * weight.astype(F32)[None, :, None] + bias.astype(F32)[None, :, None], x.dtype)
