"""The gradients of attention: a rounding model of the backward a correct (flash) kernel computes.

A flash backward does not differentiate an explicit softmax as the reference's autograd does. It recomputes
P = exp(S - L) from scores S = s q k^T rounded in the working precision and the logsumexp L saved by the
forward, takes D_i = sum_d dO_id O_id from the forward's saved output O (rounded to the input dtype), and forms
dS = P (dP - D) with dP = dO V^T; then dQ = s dS K, dK = s dS^T Q, dV = P^T dO (P and dS rounded to the input
dtype before those products on GPUs). Mathematically equal to the reference's, numerically not: where keys share
a large offset (mean >> std), dQ_i = s sum_j dS_ij K_j cancels (sum_j dS_ij = 0), and dS's rounding times |K|
dominates a tiny answer. Per query i and key j, with u the working precision's unit roundoff, u_d the input
dtype's (u for float32 and float64 inputs), g(n) = sqrt(n) (n when the case's addends are correlated):

    e_ij   = u (g(D) s sum_d |q_id||k_jd| + 2|S_ij| + 2|L_i| + g(T) + k_f + 1)   relative error of exp(S - L)
    eP_ij  = P_ij (e^e_ij - 1), at most what keeps P within [0, 1]               the recomputed P's error
    eO_id  = u_d |O_id| + sum_j (eP_ij + u_d P_ij)|v_jd| + g(T) u (P|V|)_id       the saved forward output's
    eD_i   = sum_d |dO_id| (eO_id + g(Dv) u |O_id|)
    edP_ij = g(Dv) u sum_d |dO_id||v_jd|
    A_ij   = eP_ij |dP_ij - D_i| + P_ij (edP_ij + eD_i) + (u + u_d)|dS_ij| + eta_d    the error of dS
    dQ_id: c s (sum_j A_ij |k_jd| + (g(T) + 1) u sum_j |dS_ij||k_jd|)
    dK_jd: c s (sum_i A_ij |q_id| + (g(S G) + 1) u sum_i |dS_ij||q_id|)   (i over the group's query heads)
    dV_jd: c (sum_i (eP_ij + u_d P_ij + eta_d)|dO_id| + g(S G) u sum_i P_ij |dO_id|)

everything in float64 from the case's inputs, the reference's output and the upstream gradient (eta_d: half the
input dtype's smallest subnormal, for 16-bit inputs, where P and dS underflow when rounded). The gradient's own
rounding to its dtype is added by the caller (oracle/gradients.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from math import sqrt

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.config.model import OpSpec
from gpuemu_ci.oracle import attention_layout, bounds
from gpuemu_ci.oracle.attention_layout import AttentionLayout
from gpuemu_ci.oracle.invariants import MIN_ROWS

UNIDENTIFIED = (
    "; the attention backward's rounding model was not used: no layout of the inputs (declared dims, or "
    "[..., H, S, D]) with the causal/scale kwargs reproduces the reference's output, so the baseline-relative "
    "rule alone judged (declare the inputs' dims and `output` to get it)"
)


@dataclass(frozen=True)
class AttentionGradientBound:
    """The attention backward's rounding model for one case: an allowance per input's gradient, and what it says."""

    allowances: Mapping[str, np.ndarray]  # input name -> allowance, in the input's own layout
    layout: AttentionLayout
    working: str  # the working precision's dtype
    rounded_to: str | None  # the 16-bit dtype P, dS and O are rounded to
    c: float = 4.0  # the bound's c

    def bias_samples(self, name: str, g: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """The gradient and its reference as rows of independent samples for the bias test
        (oracle/invariants.bias_z), or None where there are too few of them to test.

        The rounding of a row's logsumexp (and of the forward's P, summed into it, in 16 bits) shifts every P of
        that query row by one relative amount: the rows of dQ, and for dK and dV every key of a (batch, key/value
        head), which sums those P, lean the same way. A truncating store leans toward zero in every one."""
        mapped = self.layout.maps.get(name)
        if mapped is None or tuple(g.shape) != tuple(r.shape):
            return None
        g_c, r_c = mapped.to_canonical(np.asarray(g)), mapped.to_canonical(np.asarray(r))
        b, h, t, d = g_c.shape
        rows = (b * h * t, d) if name == self.layout.q else (b * h, t * d)
        if rows[0] < MIN_ROWS:
            return None
        return g_c.reshape(rows), r_c.reshape(rows)

    def words(self) -> str:
        """What the model allows for, for a failed gradient's message."""
        rounded = f"; P, dS and the saved O rounded to {self.rounded_to}" if self.rounded_to else ""
        return (
            f"; where larger, the allowance is the attention backward's rounding model ({self.c:g} × its "
            "roundings): P recomputed as "
            "exp(S - L) from scores and the saved logsumexp, D = rowsum(dO * O) from the saved output, "
            f"dS = P (dP - D) and its products with K, Q and dO summed in {self.working}{rounded} "
            f"({self.layout.words()})"
        )


def gradient_bound(
    op: OpSpec,
    case_dtype: str,
    inputs: Mapping[str, np.ndarray],
    output: np.ndarray,
    upstream: np.ndarray,
    kwargs: Mapping[str, object],
    correlated: bool = False,
) -> AttentionGradientBound | None:
    """The allowances of q's, k's and v's gradients (module docstring), or None where the op's structure cannot
    be identified (oracle/attention_layout.py) or its values are not finite."""
    floats = {n: np.asarray(x, dtype=np.float64) for n, x in inputs.items()}
    layout = attention_layout.identify(op, floats, output, kwargs)
    if layout is None:
        return None
    d_out = np.asarray(upstream, dtype=np.float64)
    if d_out.shape != np.shape(output) or not np.isfinite(d_out).all():
        return None
    maps = layout.maps
    q = maps[layout.q].to_canonical(floats[layout.q])
    k = maps[layout.k].to_canonical(floats[layout.k])
    v = maps[layout.v].to_canonical(floats[layout.v])
    o = maps["output"].to_canonical(np.asarray(output, dtype=np.float64))
    g_o = maps["output"].to_canonical(d_out)
    heads, kv_heads = q.shape[1], k.shape[1]
    k_all = attention_layout.expand_heads(k, heads, layout.blocked)
    v_all = attention_layout.expand_heads(v, heads, layout.blocked)

    u = bounds.accumulator_roundoff(op, case_dtype)
    sixteen = case_dtype in ("float16", "bfloat16")
    u_d = dtypes.info(case_dtype).unit_roundoff if sixteen else u
    eta_d = dtypes.info(case_dtype).min_subnormal / 2.0 if sixteen else 0.0
    k_f = op.error_model.transcendental_ulps
    s = abs(layout.scale)
    s_len, t_len, d_len, dv_len = q.shape[2], k.shape[2], q.shape[3], v.shape[3]

    def g(n: int) -> float:
        return float(max(n, 1)) if correlated else sqrt(max(n, 1))

    abs_kt = np.swapaxes(np.abs(k_all), -1, -2)
    scores = attention_layout.scores(q, k_all, layout.scale, layout.mask)
    keep = np.isfinite(scores)
    p, lse = attention_layout.softmax_rows(scores)
    finite_scores = np.where(keep, scores, 0.0)
    s_abs = s * (np.abs(q) @ abs_kt)
    e = u * (g(d_len) * s_abs + 2.0 * np.abs(finite_scores) + 2.0 * np.abs(lse) + g(t_len) + k_f + 1.0)
    e = np.where(keep, e, 0.0)
    # exp of an argument off by e: P e^{+-e}, never outside [0, 1].
    with np.errstate(over="ignore"):
        high = np.minimum(p * np.exp(np.minimum(e, 700.0)), 1.0)
    p_err = np.maximum(high - p, p - p * np.exp(-e))
    del high, e

    abs_v = np.abs(v_all)
    abs_vt = np.swapaxes(abs_v, -1, -2)
    pv_abs = p @ abs_v
    o_err = u_d * np.abs(o) + (p_err + u_d * p) @ abs_v + g(t_len) * u * pv_abs
    d_i = (g_o * o).sum(axis=-1, keepdims=True)
    d_err = (np.abs(g_o) * (o_err + g(dv_len) * u * np.abs(o))).sum(axis=-1, keepdims=True)
    dp = g_o @ np.swapaxes(v_all, -1, -2)
    dp_err = g(dv_len) * u * (np.abs(g_o) @ abs_vt)
    ds = p * (dp - d_i)
    abs_ds = np.abs(ds)
    a = p_err * np.abs(dp - d_i) + p * (dp_err + d_err) + (u + u_d) * abs_ds + np.where(keep, eta_d, 0.0)
    del dp, dp_err

    c = op.error_model.bound_c
    per_group = heads // max(kv_heads, 1)
    dq = c * s * (a @ np.abs(k_all) + (g(t_len) + 1.0) * u * (abs_ds @ np.abs(k_all)))
    dk_all = (
        c
        * s
        * (
            np.swapaxes(a, -1, -2) @ np.abs(q)
            + (g(s_len * per_group) + 1.0) * u * (np.swapaxes(abs_ds, -1, -2) @ np.abs(q))
        )
    )
    pt = np.swapaxes(p_err + u_d * p + np.where(keep, eta_d, 0.0), -1, -2)
    dv_all = c * (pt @ np.abs(g_o) + g(s_len * per_group) * u * (np.swapaxes(p, -1, -2) @ np.abs(g_o)))
    allowances = {
        layout.q: maps[layout.q].from_canonical(dq, floats[layout.q].shape),
        layout.k: maps[layout.k].from_canonical(
            _sum_groups(dk_all, kv_heads, layout.blocked), floats[layout.k].shape
        ),
        layout.v: maps[layout.v].from_canonical(
            _sum_groups(dv_all, kv_heads, layout.blocked), floats[layout.v].shape
        ),
    }
    working = op.error_model.accumulator or ("float32" if sixteen else case_dtype)
    return AttentionGradientBound(allowances, layout, working, case_dtype if sixteen else None, c)


def _sum_groups(x: np.ndarray, kv_heads: int, blocked: bool) -> np.ndarray:
    """[b, heads, t, d] summed over the query heads that read each key/value head: [b, kv_heads, t, d]."""
    b, heads, t, d = x.shape
    group = heads // max(kv_heads, 1)
    if group == 1:
        return x
    if blocked:  # head h reads kv head h // group
        return np.asarray(x.reshape(b, kv_heads, group, t, d).sum(axis=2))
    return np.asarray(x.reshape(b, group, kv_heads, t, d).sum(axis=1))  # head h reads kv head h % kv_heads
