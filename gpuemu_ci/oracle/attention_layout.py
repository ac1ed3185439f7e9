"""Which inputs of an `attention` op are q, k and v, and how their axes map to [batch, head, sequence, feature].

The gradient bound of attention (oracle/attention_grads.py) needs the scores and probabilities per query and key,
so it must know the op's structure: the layouts `[B, H, S, D]`, K/V as `[B, T, KVH, D]`, grouped query heads
(H = KVH x G), a 3-D `[B, S, D]`, the causal mask and the softmax scale. They come from the declared dims (the
names shared between q, k, v and the output) or, without names, from the common `[..., H, S, D]` layout; the
causal mask from `is_causal`/`causal`, the scale from `scale`/`sm_scale`/`softmax_scale` (else 1/sqrt(D)).

A structure is never assumed: each candidate is checked by recomputing the forward in float64 and comparing it
with the reference's output. Where none reproduces it (an additive mask, dropout, a layout that is not one of
these), `identify` returns None and the caller keeps the rule that needs no structure.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import permutations
from math import prod, sqrt

import numpy as np

from gpuemu_ci.config.model import OpSpec

CAUSAL_KWARGS = ("is_causal", "causal")
SCALE_KWARGS = ("scale", "sm_scale", "softmax_scale")
# The recomputed forward must match the reference's to this relative accuracy (both are float64; a wrong
# structure is off by O(1)).
MATCH = 1e-6


class Mask:
    """The causal masks the attention model can reproduce."""

    NONE = "none"
    TOP_LEFT = "top-left"  # query i sees keys 0..i (torch's is_causal)
    BOTTOM_RIGHT = "bottom-right"  # query i sees keys 0..i + T - S (FlashAttention's, for S != T)


@dataclass(frozen=True)
class AxisMap:
    """How one tensor's axes become canonical: transpose by `order`, then reshape to `shape`."""

    order: tuple[int, ...]
    shape: tuple[int, int, int, int]

    def to_canonical(self, x: np.ndarray) -> np.ndarray:
        """x with its axes permuted and merged into [batch, head, sequence, feature]."""
        return np.ascontiguousarray(np.transpose(x, self.order)).reshape(self.shape)

    def from_canonical(self, x: np.ndarray, original_shape: tuple[int, ...]) -> np.ndarray:
        """A canonical [batch, head, sequence, feature] array back in the layout of `original_shape`."""
        permuted = tuple(original_shape[a] for a in self.order)
        return np.transpose(x.reshape(permuted), np.argsort(self.order))


@dataclass(frozen=True)
class AttentionLayout:
    """q, k, v (input names) and their maps to [batch, head, seq, feature]; the output's map; query head h reads
    key/value head h // group (`blocked`, torch's repeat_interleave) or h % kv_heads; the mask and the scale."""

    q: str
    k: str
    v: str
    maps: Mapping[str, AxisMap]  # by input name, and "output"
    blocked: bool
    mask: str
    scale: float

    def words(self) -> str:
        """Which input is q, k and v, the scale and the mask, for a message."""
        mask = "" if self.mask == Mask.NONE else f", {self.mask} causal mask"
        return f"q={self.q}, k={self.k}, v={self.v}, scale {self.scale:.4g}{mask}"


def identify(
    op: OpSpec,
    inputs: Mapping[str, np.ndarray],
    output: np.ndarray,
    kwargs: Mapping[str, object],
) -> AttentionLayout | None:
    """The layout that reproduces the reference's output, or None (module docstring)."""
    floats = [s.name for s in op.shapes.inputs if s.name in inputs]
    if len(floats) < 3:
        floats = list(inputs)[:3]
    if len(floats) < 3 or any(k in kwargs and kwargs[k] is not None for k in ("attn_mask", "mask")):
        return None
    q, k, v = (np.asarray(inputs[n], dtype=np.float64) for n in floats[:3])
    out = np.asarray(output, dtype=np.float64)
    if not all(np.isfinite(x).all() for x in (q, k, v, out)):
        return None
    causal = any(bool(kwargs.get(name)) for name in CAUSAL_KWARGS)
    masks = (Mask.TOP_LEFT, Mask.BOTTOM_RIGHT) if causal else (Mask.NONE,)
    for maps in _candidate_maps(op, floats[:3], (q, k, v), out):
        qc, kc, vc, oc = (
            maps[n].to_canonical(x) for n, x in zip((*floats[:3], "output"), (q, k, v, out), strict=True)
        )
        groupings = (True, False) if qc.shape[1] != kc.shape[1] else (True,)
        scale = _scale(kwargs, qc.shape[-1])
        for blocked in groupings:
            for mask in masks:
                if _reproduces(qc, kc, vc, oc, blocked, mask, scale):
                    return AttentionLayout(floats[0], floats[1], floats[2], maps, blocked, mask, scale)
    return None


def _scale(kwargs: Mapping[str, object], d: int) -> float:
    for name in SCALE_KWARGS:
        value = kwargs.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return 1.0 / sqrt(max(d, 1))


def expand_heads(x: np.ndarray, heads: int, blocked: bool) -> np.ndarray:
    """K or V [b, kvh, t, d] for every query head [b, heads, t, d]."""
    kv = x.shape[1]
    if kv == heads:
        return x
    return np.repeat(x, heads // kv, axis=1) if blocked else np.tile(x, (1, heads // kv, 1, 1))


def keep_mask(s: int, t: int, mask: str) -> np.ndarray | None:
    """[s, t] True where query i sees key j; None when all do."""
    if mask == Mask.NONE:
        return None
    shift = 0 if mask == Mask.TOP_LEFT else t - s
    return np.arange(t)[None, :] <= np.arange(s)[:, None] + shift


def scores(qc: np.ndarray, kc: np.ndarray, scale: float, mask: str) -> np.ndarray:
    """s q k^T per head, -inf where masked."""
    found = scale * (qc @ np.swapaxes(kc, -1, -2))
    keep = keep_mask(qc.shape[2], kc.shape[2], mask)
    return found if keep is None else np.where(keep, found, -np.inf)


def softmax_rows(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P, L): the probabilities and the rows' logsumexp; a fully masked row has P = 0."""
    peak = s.max(axis=-1, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    e = np.exp(s - peak)
    total = e.sum(axis=-1, keepdims=True)
    safe = np.where(total > 0, total, 1.0)
    return e / safe, peak + np.log(safe)


def _reproduces(
    qc: np.ndarray, kc: np.ndarray, vc: np.ndarray, oc: np.ndarray, blocked: bool, mask: str, scale: float
) -> bool:
    heads = qc.shape[1]
    if qc.shape[0] != kc.shape[0] or heads % max(kc.shape[1], 1) or qc.shape[-1] != kc.shape[-1]:
        return False
    if kc.shape[:3] != vc.shape[:3] or oc.shape != (*qc.shape[:3], vc.shape[-1]):
        return False
    k, v = expand_heads(kc, heads, blocked), expand_heads(vc, heads, blocked)
    p, _ = softmax_rows(scores(qc, k, scale, mask))
    pv = p @ np.abs(v)
    # Rows whose scores dwarf float64's precision (boundary values near overflow) are compared loosely: there the
    # two float64 evaluations may differ, but a wrong structure still shows in the other rows.
    s_abs = scale * (np.abs(qc) @ np.swapaxes(np.abs(k), -1, -2))
    loose = 64.0 * np.finfo(np.float64).eps * s_abs.max(axis=-1, keepdims=True)
    tolerance = (MATCH + loose) * pv.max(axis=-1, keepdims=True) + 1e-300
    return bool((np.abs(p @ v - oc) <= tolerance).all())


def _candidate_maps(
    op: OpSpec, names: Sequence[str], arrays: Sequence[np.ndarray], out: np.ndarray
) -> Iterator[dict[str, AxisMap]]:
    """Axis maps for q, k, v and the output: from the declared dim names, then the `[..., H, S, D]` layout."""
    yield from _named_maps(op, names, arrays, out)
    positional = _positional_maps(names, arrays, out)
    if positional is not None:
        yield positional


def _named_maps(
    op: OpSpec, names: Sequence[str], arrays: Sequence[np.ndarray], out: np.ndarray
) -> Iterator[dict[str, AxisMap]]:
    specs = {s.name: s for s in op.shapes.inputs}
    dims = [specs[n].dims if n in specs else () for n in names]
    output = op.shapes.output_dims
    every = [*dims, output or ()]
    if output is None or any(not d or not all(isinstance(x, str) for x in d) for d in every):
        return
    if any(len(set(d)) != len(d) or len(d) != a.ndim for d, a in zip(every, (*arrays, out), strict=True)):
        return
    qd, kd, vd = (tuple(str(x) for x in d) for d in dims)
    od = tuple(str(x) for x in output)
    feature = qd[-1]
    if feature not in kd:
        return
    shared = [x for x in qd if x in kd and x != feature]
    q_only = [x for x in qd if x not in kd]
    k_only = [x for x in kd if x not in qd]
    value = [x for x in vd if x not in kd or x == feature]
    if not set(kd) - {feature} <= set(vd) or len(value) != 1:
        return
    dv = value[0]
    if set(od) != {*shared, *q_only, dv} or len(q_only) != len(k_only) or len(q_only) not in (1, 2):
        return
    sizes = {
        x: int(a.shape[i])
        for d, a in zip((qd, kd, vd, od), (*arrays, out), strict=True)
        for i, x in enumerate(d)
    }
    batch = prod(sizes[x] for x in shared)

    def axis_map(declared: tuple[str, ...], order: Sequence[str]) -> AxisMap:
        """`order` is [*batch, (head), seq, feature]: the canonical [batch, head, seq, feature]."""
        heads = sizes[order[-3]] if len(order) - len(shared) == 3 else 1
        shape = (batch, heads, sizes[order[-2]], sizes[order[-1]])
        return AxisMap(tuple(declared.index(x) for x in order), shape)

    for q_order in permutations(q_only):  # (seq, head) or (seq,)
        for k_order in permutations(k_only):
            seq_q, head_q = q_order[0], list(q_order[1:])
            seq_k, head_k = k_order[0], list(k_order[1:])
            yield {
                names[0]: axis_map(qd, [*shared, *head_q, seq_q, feature]),
                names[1]: axis_map(kd, [*shared, *head_k, seq_k, feature]),
                names[2]: axis_map(vd, [*shared, *head_k, seq_k, dv]),
                "output": axis_map(od, [*shared, *head_q, seq_q, dv]),
            }


def _positional_maps(
    names: Sequence[str], arrays: Sequence[np.ndarray], out: np.ndarray
) -> dict[str, AxisMap] | None:
    """Without declared names: every tensor `[..., H, S, D]` (a 2-D one `[S, D]`, a 3-D one `[B, S, D]`)."""
    ndim = arrays[0].ndim
    if ndim < 2 or ndim > 4 or any(a.ndim != ndim for a in (*arrays, out)):
        return None

    def axis_map(a: np.ndarray) -> AxisMap:
        shape = (1,) * (4 - ndim) + tuple(int(x) for x in a.shape)
        return AxisMap(tuple(range(ndim)), (shape[0], shape[1], shape[2], shape[3]))

    return {n: axis_map(a) for n, a in zip((*names, "output"), (*arrays, out), strict=True)}
