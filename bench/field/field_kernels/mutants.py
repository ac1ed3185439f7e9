"""The buggy variants of the NumPy kernels: each is its correct kernel re-created from source with a few-line
textual diff (`mutate.mutant`), so the bug is exactly the edit listed here and nothing else changes."""

from __future__ import annotations

from field_kernels import gemm, positional, rowwise, vocab
from field_kernels.gpu import BF16
from field_kernels.mutate import mutant

_TRUNCATING = ("return store(", "return store_truncating(")

# ---- softmax -----------------------------------------------------------------------------------------------
softmax_tail_zero = mutant(
    rowwise.softmax_online,
    [("mask[None, :], other=-np.inf)", "mask[None, :], other=0.0)")],
)
softmax_max_init_zero = mutant(
    rowwise.softmax_online,
    [("m = np.full(m_rows, -np.inf, dtype=F32)", "m = np.full(m_rows, 0.0, dtype=F32)")],
)
softmax_row_stride_n = mutant(
    rowwise.softmax_online, [("row = _row_offsets(m_rows, X.strides[0])", "row = _row_offsets(m_rows, n)")]
)
softmax_truncating_store = mutant(rowwise.softmax_online, [_TRUNCATING])

# ---- row sum (two-level tree) ------------------------------------------------------------------------------
_SUM_LOAD = "acc += load(X, row[:, None] + cols[None, :], (cols < n)[None, :], other=0.0)"
row_sum_acc_assign = mutant(rowwise.row_sum, [(_SUM_LOAD, _SUM_LOAD.replace("acc += ", "acc = "))])
row_sum_half_accumulator = mutant(
    rowwise.row_sum,
    [
        (
            _SUM_LOAD,
            "acc = round_to(acc + load(X, row[:, None] + cols[None, :], (cols < n)[None, :], 0.0), x.dtype)",
        ),
        ("partials[:, p] = tree_sum(acc)", "partials[:, p] = round_to(tree_sum(acc), x.dtype)"),
    ],
)
row_sum_int32_offsets = mutant(
    rowwise.row_sum,
    [
        (
            "row = _row_offsets(m_rows, X.strides[0])",
            "row = np.arange(m_rows, dtype=np.int32) * np.int32(X.strides[0])",
        ),
        (
            "cols = start + np.arange(SUM_BLOCK)",
            "cols = np.int32(start) + np.arange(SUM_BLOCK, dtype=np.int32)",
        ),
    ],
)

# ---- RMSNorm -----------------------------------------------------------------------------------------------
_SUM_SQ = "sum_sq += tree_sum(xb * xb)"
rms_norm_acc_assign = mutant(rowwise.rms_norm, [(_SUM_SQ, "sum_sq = tree_sum(xb * xb)")])
rms_norm_sumsq_bf16 = mutant(
    rowwise.rms_norm, [(_SUM_SQ, "sum_sq = round_to(sum_sq + tree_sum(xb * xb), BF16)")], {"BF16": BF16}
)
rms_norm_eps_ignored = mutant(rowwise.rms_norm, [(" + F32(eps))", ")")])
rms_norm_truncating_store = mutant(rowwise.rms_norm, [_TRUNCATING])

# ---- LayerNorm (Welford) -----------------------------------------------------------------------------------
layer_norm_eps_ignored = mutant(rowwise.layer_norm_welford, [(" + F32(eps))", ")")])
layer_norm_bias_by_row = mutant(
    rowwise.layer_norm_welford,
    [("b = load(B, cols[None, :] * B.strides[0])", "b = load(B, np.arange(m_rows)[:, None] * B.strides[0])")],
)
layer_norm_row_stride_n = mutant(
    rowwise.layer_norm_welford,
    [("row = _row_offsets(m_rows, X.strides[0])", "row = _row_offsets(m_rows, n)")],
)

# ---- std / var ---------------------------------------------------------------------------------------------
_one_pass_sum_sq = mutant(
    rowwise._centred_sum_sq,
    [
        (
            "centred = np.where(mask, xb - mean[:, None], F32(0))\n        ss += tree_sum(centred * centred)\n"
            "    return ss, n",
            "ss += tree_sum(xb * xb)\n    return ss - F32(n) * mean * mean, n",
        )
    ],
)
row_std_one_pass = mutant(rowwise.row_std, [], {"_centred_sum_sq": _one_pass_sum_sq})
row_var_one_pass = mutant(rowwise.row_var, [], {"_centred_sum_sq": _one_pass_sum_sq})
row_std_correction_ignored = mutant(rowwise.row_std, [("F32(n - correction)", "F32(n - 1)")])

# ---- GroupNorm ---------------------------------------------------------------------------------------------
group_norm_eps_ignored = mutant(rowwise.group_norm, [(" + F32(eps))", ")")])
group_norm_bias_by_position = mutant(
    rowwise.group_norm,
    [
        (
            "b = load(B, channel * B.strides[0])",
            "b = load(B, np.broadcast_to((i % length)[None, :], channel.shape) * B.strides[0])",
        )
    ],
)

# ---- chunked cross-entropy ---------------------------------------------------------------------------------
cross_entropy_acc_assign = mutant(
    vocab.cross_entropy_chunked, [("d = d * np.exp2((m - m_new) * LOG2_E) + chunk_sum", "d = chunk_sum")]
)
cross_entropy_max_init_zero = mutant(
    vocab.cross_entropy_chunked,
    [("m = np.full(rows, -np.inf, dtype=F32)", "m = np.full(rows, 0.0, dtype=F32)")],
)
cross_entropy_tail_zero = mutant(
    vocab.cross_entropy_chunked,
    [
        (
            "xb = load(X, row[:, None] + cols[None, :], mask, other=-np.inf)",
            "xb = load(X, row[:, None] + cols[None, :], mask, other=0.0)",
        )
    ],
)
cross_entropy_row_stride_n = mutant(
    vocab.cross_entropy_chunked,
    [("row = np.arange(rows, dtype=np.int64) * X.strides[0]", "row = np.arange(rows, dtype=np.int64) * v")],
)
cross_entropy_smoothing_ignored = mutant(
    vocab.cross_entropy_chunked, [("s = F32(label_smoothing)", "s = F32(0.0)")]
)

# ---- argmax ------------------------------------------------------------------------------------------------
argmax_max_init_zero = mutant(
    vocab.argmax_rows, [("best = np.full(rows, -np.inf, dtype=F32)", "best = np.full(rows, 0.0, dtype=F32)")]
)
argmax_tie_last = mutant(vocab.argmax_rows, [("take = block_max > best", "take = block_max >= best")])
argmax_tail_zero = mutant(
    vocab.argmax_rows, [("(cols < v)[None, :], other=-np.inf)", "(cols < v)[None, :], other=0.0)")]
)

# ---- split-K linear ----------------------------------------------------------------------------------------
linear_acc_assign = mutant(gemm.linear_splitk, [("acc += a @ b.T", "acc = a @ b.T")])
linear_half_partials = mutant(
    gemm.linear_splitk, [("partials[s] = acc", "partials[s] = round_to(acc, x.dtype)")]
)
linear_bias_by_row = mutant(
    gemm.linear_splitk,
    [
        (
            "bias_row = load(B, cols * B.strides[0])[None, :]",
            "bias_row = load(B, rows * B.strides[0])[:, None]",
        )
    ],
)
linear_truncating_store = mutant(gemm.linear_splitk, [_TRUNCATING])

# ---- conv1d / pooling --------------------------------------------------------------------------------------
conv1d_no_halo = mutant(gemm.conv1d, [("loaded = need", "loaded = CONV_TILE * stride")])
conv1d_half_accumulator = mutant(
    gemm.conv1d,
    [
        (
            'acc += np.einsum("bcl,oc->bol", tile[:, :, cols], taps[:, :, j], dtype=F32)',
            'acc = round_to(acc + np.einsum("bcl,oc->bol", tile[:, :, cols], taps[:, :, j], dtype=F32), x.dtype)',
        )
    ],
)
max_pool1d_pad_zero = mutant(
    gemm.max_pool1d, [("inside[None, None, :], -np.inf)", "inside[None, None, :], 0.0)")]
)

# ---- positional --------------------------------------------------------------------------------------------
rope_offset_ignored = mutant(
    positional.rope_fp32_angles,
    [
        (
            "pos = (np.arange(t, dtype=np.int64) + position_offset).astype(F32)",
            "pos = np.arange(t, dtype=np.int64).astype(F32)",
        )
    ],
)
rope_angles_in_input_dtype = mutant(
    positional.rope_fp32_angles,
    [
        (
            "pos = (np.arange(t, dtype=np.int64) + position_offset).astype(F32)",
            "pos = round_to(np.arange(t, dtype=np.int64) + position_offset, x.dtype)",
        )
    ],
)
qk_norm_rope_k_uses_q_weight = mutant(
    positional.qk_norm_rope_concat,
    [
        (
            "kn = _rms_normed(k.astype(F32), k_weight.astype(F32), eps)",
            "kn = _rms_normed(k.astype(F32), q_weight.astype(F32), eps)",
        )
    ],
)
embedding_int32_offsets = mutant(
    positional.embedding,
    [
        (
            "offsets = rows[:, None] * tab.strides[0] + cols[None, :] * tab.strides[1]",
            "offsets = rows.astype(np.int32)[:, None] * np.int32(tab.strides[0])"
            " + cols.astype(np.int32)[None, :] * np.int32(tab.strides[1])",
        )
    ],
)
