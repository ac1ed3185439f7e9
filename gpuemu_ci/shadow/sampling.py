"""Which calls a shadow checker checks: always the first, always inputs of a shape or dtype never seen before,
outliers (inputs unlike the recent ones), and otherwise a random sample with a settable probability.

The outlier detector keeps, per feature of a call (per input: log-magnitude of the mean, of the spread and of
the largest value, and the share of non-finite values), the recent values in a window, and scores a call by
its largest robust z-score: distance to the window's median in units of its median absolute deviation. A
call scoring at least `threshold` is an outlier. Unlike a distance to a running centroid normalised by past
distances, a robust score is not dragged by the outliers it has seen, sees a change in one feature that a
distance over all of them would average away, and needs no warm-up of "past distances" to be calibrated.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

FEATURE_SAMPLE = 4096  # elements of each input the features are computed from (strided over the input)
WINDOW = 256  # recent calls the outlier detector compares with
MIN_HISTORY = 16  # calls seen before anything is called an outlier
DEFAULT_THRESHOLD = 6.0  # robust z-score; 6 MADs is far outside what a stable stream shows


class Reason(StrEnum):
    """Why a call was checked."""

    FIRST = "first call"
    NEW_SIGNATURE = "new shape or dtype"
    OUTLIER = "outlier inputs"
    RANDOM = "random sample"


def features(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Per input: log-magnitudes of mean, standard deviation and max |x|, and the non-finite share, from a
    strided sample of at most FEATURE_SAMPLE elements (cheap enough to compute on every call)."""
    out: list[float] = []
    for array in arrays:
        flat = array.reshape(-1)
        if flat.size > FEATURE_SAMPLE:
            flat = flat[:: flat.size // FEATURE_SAMPLE][:FEATURE_SAMPLE]
        values = flat.astype(np.float64, copy=False)
        finite = values[np.isfinite(values)]
        nonfinite = 1.0 - finite.size / values.size if values.size else 0.0
        if finite.size == 0:
            out += [0.0, 0.0, 0.0, nonfinite]
            continue
        out += [
            _signed_log(float(finite.mean())),
            _signed_log(float(finite.std())),
            _signed_log(float(np.abs(finite).max())),
            nonfinite,
        ]
    return np.asarray(out, dtype=np.float64)


def _signed_log(value: float) -> float:
    return math.copysign(math.log1p(abs(value)), value)


class RobustOutliers:
    """The outlier detector described in the module docstring."""

    def __init__(self, threshold: float = DEFAULT_THRESHOLD, window: int = WINDOW) -> None:
        self.threshold = threshold
        self._history: deque[np.ndarray] = deque(maxlen=window)

    def score(self, feature: np.ndarray) -> float:
        """The call's largest robust z-score over its features (0 until MIN_HISTORY calls were seen); the
        call is then remembered."""
        score = 0.0
        comparable = [h for h in self._history if h.shape == feature.shape]
        if len(comparable) >= MIN_HISTORY:
            history = np.stack(comparable)
            median = np.median(history, axis=0)
            mad = np.median(np.abs(history - median), axis=0)
            # A floor on the spread: a feature that never moved is not infinitely surprised by noise.
            scale = 1.4826 * mad + 1e-3 * (1.0 + np.abs(median))
            score = float(np.max(np.abs(feature - median) / scale))
        self._history.append(feature)
        return score

    def is_outlier(self, feature: np.ndarray) -> bool:
        return self.score(feature) >= self.threshold


@dataclass
class Sampler:
    """Decides, call by call, whether to check (see the module docstring)."""

    probability: float = 0.01
    outliers: RobustOutliers | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        self._seen: set[tuple[object, ...]] = set()
        self._random = random.Random(self.seed)
        if self.outliers is None:
            self.outliers = RobustOutliers()

    def decide(self, arrays: Sequence[np.ndarray]) -> Reason | None:
        """The reason to check this call, or None to let it pass unchecked."""
        signature = tuple((a.shape, a.dtype.str) for a in arrays)
        first = not self._seen
        new = signature not in self._seen
        self._seen.add(signature)
        outlier = self.outliers is not None and self.outliers.is_outlier(features(arrays))
        if first:
            return Reason.FIRST
        if new:
            return Reason.NEW_SIGNATURE
        if outlier:
            return Reason.OUTLIER
        if self.probability > 0 and self._random.random() < self.probability:
            return Reason.RANDOM
        return None
