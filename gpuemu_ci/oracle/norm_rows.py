"""A norm's gradients beyond row_statistics.layer_norm_terms: an RMS norm's cancelling terms, and the rstd a
backward reads back in the input's dtype (issue #32).

Both forms normalise each row (each group of channels, with a `num_groups` kwarg) by rstd = 1/sqrt(m + eps),
x_hat = (x - mean) rstd for a layer norm (m the variance), x_hat = x rstd for an RMS norm (m the mean square), and
their gradients are, with w the per-column weight (1 without one),

    x:      rstd (g w - mean(g w) - x_hat mean(g w x_hat))     (RMS norm: without mean(g w))
    weight: sum over the rows of g x_hat.

- **An RMS norm's cancelling terms.** Where one value dominates its row (8.6e9 next to 0.66) x_hat of the large
  value is sqrt(n) and `g w - x_hat mean(g w x_hat)` cancels to 1e-25 while each term is rstd |g w| = 3e-9: a
  correct float32 kernel returns their rounding (2.2e-16, PyTorch's CPU `rms_norm`), 1e7 times the bound at the
  scale of |g_ref|. The bound counts its roundings at rstd (|g w| + |x_hat| mean|g w x_hat|), as layer_norm_terms
  does for a layer norm.
- **The saved rstd.** PyTorch's CPU layer norm returns its mean and rstd in the input's dtype (bfloat16 rstd
  1.4921875 where it is 1.48837) and its float32 backward reads them back: x_hat carries rstd's relative
  rounding delta <= u (the case dtype's unit roundoff). In x's gradient the product x_hat mean(g w x_hat) carries
  it twice, so the gradient moves by 2 delta rstd |x_hat| |mean(g w x_hat)| (the outer rstd moves it by
  delta |g_ref|, its own rounding); in the weight's, by delta sum |g x_hat|. On rows of two values (x_hat = +-1)
  the exact gradient is rstd (a - b)/2 eps/(var + eps), 5e-7, and that rounding leaves 1e-3 (torch's backward
  emulated in float32 from the bfloat16 statistics reproduces it bit for bit). The layer norm's rounded mean is
  row_statistics' (`saved_mean`).

Recognised by form: the reference's gradient must equal the form's, to row_statistics.FORM_TOLERANCE of the
terms' scale and the reference's own float64 rounding of x_hat (centring_noise).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.config.model import OpSpec
from gpuemu_ci.oracle.row_statistics import (
    FORM_TOLERANCE,
    Forward,
    NormRows,
    centring_noise,
    norm_rows,
    x_gradient_blur,
)
from gpuemu_ci.oracle.terms import GradientTermCase, SpeaksOnly

_U64 = dtypes.info("float64").unit_roundoff


@dataclass(frozen=True)
class Terms:
    """What a norm's gradient cancels and inherits from statistics saved in the case's dtype."""

    scale: np.ndarray  # the terms the gradient cancels (zeros where none is modelled here)
    saved: np.ndarray  # what the rstd rounded to the case's dtype moves the gradient by
    words: str
    # The gradient evaluated exactly from the mean and rstd rounded to the case's dtype, in r's shape: what a
    # backward that reads back statistics saved in that dtype returns before its own store (PyTorch's CPU
    # bfloat16 group norm bit for bit, five cases of 256 values), for the bias test.
    from_saved: np.ndarray


def terms(op: OpSpec, case_dtype: str, forward: Forward | None, name: str, r: np.ndarray) -> Terms | None:
    """The cancelling terms of an RMS norm's x gradient and the saved rstd's rounding (module docstring); None
    for other ops and inputs, and where the reference's gradient has neither form."""
    found = norm_rows(op, forward, name, r)
    if found is None or not np.all(np.isfinite(r)) or not np.all(np.isfinite(found.w)):
        return None
    with np.errstate(all="ignore"):
        for centred in (True, False):
            matched = _form(found, name, r, centred, case_dtype)
            if matched is not None:
                return matched
    return None


def _form(norm: NormRows, name: str, r: np.ndarray, centred: bool, case_dtype: str) -> Terms | None:
    x, g, w = norm.x, norm.g, norm.w
    n = x.shape[-1]
    mean = x.mean(axis=-1, keepdims=True) if centred else np.zeros((*x.shape[:-1], 1))
    shifted = x - mean
    rstd = 1.0 / np.sqrt((shifted * shifted).mean(axis=-1, keepdims=True) + norm.eps)
    if not np.all(np.isfinite(rstd)):
        return None
    x_hat = shifted * rstd
    noise = centring_noise(x, mean, rstd) if centred else 4.0 * n * _U64 * np.abs(x_hat)
    tiny = dtypes.info("float64").min_normal
    delta = dtypes.info(case_dtype).unit_roundoff  # the saved rstd's relative rounding
    gw = g * w
    mean_gwx = (gw * x_hat).mean(axis=-1, keepdims=True)
    saved_dtype = dtypes.info(case_dtype).numpy
    rstd_saved = rstd.astype(saved_dtype).astype(np.float64)
    x_hat_saved = (x - mean.astype(saved_dtype).astype(np.float64)) * rstd_saved
    if name == norm.weight:
        others = tuple(i for i in range(len(norm.shape)) if i != norm.param_axis)
        summed = (g * x_hat).reshape(norm.shape).sum(axis=others)
        size = np.abs(g * x_hat).reshape(norm.shape).sum(axis=others)
        blur = (np.abs(g) * noise).reshape(norm.shape).sum(axis=others)
        if not _close(r, summed, size + tiny, blur):
            return None
        from_saved = (g * x_hat_saved).reshape(norm.shape).sum(axis=others)
        return Terms(
            np.zeros_like(r), np.asarray(delta * size), _words(centred, case_dtype, weight=True), from_saved
        )
    mean_gw = gw.mean(axis=-1, keepdims=True) if centred else np.zeros_like(mean_gwx)
    scale = rstd * (
        np.abs(gw)
        + (np.abs(gw).mean(axis=-1, keepdims=True) if centred else 0.0)
        + np.abs(x_hat) * np.abs(gw * x_hat).mean(axis=-1, keepdims=True)
    )
    blur = x_gradient_blur(rstd, x_hat, gw, mean_gwx, noise)
    if not _close(r.reshape(x.shape), rstd * (gw - mean_gw - x_hat * mean_gwx), scale + tiny, blur):
        return None
    saved = 2.0 * delta * rstd * np.abs(x_hat) * np.abs(mean_gwx)
    from_saved = rstd_saved * (gw - mean_gw - x_hat_saved * (gw * x_hat_saved).mean(axis=-1, keepdims=True))
    # A layer norm's cancelling terms are row_statistics' (layer_norm_terms); an RMS norm's are counted here.
    scale = np.zeros(x.shape) if centred else scale
    return Terms(
        scale.reshape(norm.shape),
        saved.reshape(norm.shape),
        _words(centred, case_dtype, weight=False),
        from_saved.reshape(norm.shape),
    )


def _close(r: np.ndarray, predicted: np.ndarray, scale: np.ndarray, blur: np.ndarray) -> bool:
    """r equals the form's value to FORM_TOLERANCE of its terms' scale, plus what the reference's own float64
    rounding of x_hat moves it by (`blur`)."""
    usable = np.isfinite(predicted) & np.isfinite(scale) & np.isfinite(blur)
    gap = np.abs(r - predicted)
    return bool(np.any(usable)) and bool(np.all((gap <= FORM_TOLERANCE * scale + blur)[usable]))


def _words(centred: bool, case_dtype: str, weight: bool) -> str:
    form = "layer norm" if centred else "RMS norm"
    carried = "delta sum |g x_hat|" if weight else "2 delta rstd |x_hat| |mean(g w x_hat)|"
    cancelled = (
        ""
        if centred or weight
        else ", and the roundings of the terms it cancels, rstd (|g w| + |x_hat| mean|g w x_hat|)"
    )
    return (
        f"; it includes the {form}'s rstd saved in {case_dtype} and read back by the backward ({carried}, "
        f"delta = u of {case_dtype}){cancelled}"
    )


def words(
    op: OpSpec, case_dtype: str, forward: Forward | None, name: str, r: np.ndarray, mismatched: bool
) -> str:
    """What the allowance includes, for a mismatch's message; empty where `terms` does not apply."""
    if not mismatched:
        return ""
    found = terms(op, case_dtype, forward, name, r)
    return "" if found is None else found.words


class SavedNormStatistics(SpeaksOnly):
    """The words of a norm's statistics saved in the case dtype; their allowance widens the structure bound's
    scale S (gradients.structure_bound takes terms().scale), so the term adds nothing itself."""

    name = "saved_norm_statistics"
    models = "a norm's mean and rstd saved in the case dtype (widens S, adds the saved rstd's rounding)"

    def words(self, case: GradientTermCase) -> str:
        """words()."""
        return words(case.op, case.dtype, case.forward, case.name, case.reference, case.mismatched)


TERM = SavedNormStatistics()
