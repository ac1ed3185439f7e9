"""Which calls a shadow checker checks: always the first, always inputs of a shape or dtype never seen before,
outliers (inputs unlike the recent ones), and otherwise a random sample with a settable probability.

The outlier detector describes each call by a few features per input (log-magnitudes of the mean, the spread
and the largest value, computed from a strided sample of elements) and keeps the recent calls in a window.
A call is an outlier when it carries a non-finite value where recent calls had none, or when its distance to
its k-th nearest recent call is `threshold` times the distance typical within the window (features scaled by
their robust spread). Unlike a distance to a running centroid normalised by past distances, a nearest-neighbour
distance is not dragged by the outliers it has seen and is not fooled by a stream that mixes several regular
kinds of call (the layers of a network calling one norm kernel each see their own, different activations).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

FEATURE_SAMPLE = 1024  # elements of each input the features are computed from (strided over the input)
WINDOW = 256  # recent calls the outlier detector compares with
MIN_HISTORY = 16  # calls seen before anything is called an outlier
DEFAULT_THRESHOLD = 4.0  # times the typical neighbour distance within the window
# The smallest spread a feature is given (a log-magnitude, so 0.1 is about a 10% change): a stream of calls
# with identical inputs (a fixed batch, frozen weights) must not make every later drift an outlier.
MIN_FEATURE_SCALE = 0.1
TYPICAL_FROM = 64  # calls whose neighbour distances define the typical distance


class Reason(StrEnum):
    """Why a call was checked."""

    FIRST = "first call"
    NEW_SIGNATURE = "new shape or dtype"
    OUTLIER = "outlier inputs"
    RANDOM = "random sample"


def features(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Per input: log-magnitudes of mean, standard deviation and max |x|, and the non-finite share, from a
    sample of at most FEATURE_SAMPLE elements (see `tensors.element_sample`); a handful of NumPy calls, so it
    can run on every call."""
    out: list[float] = []
    for array in arrays:
        values = array.reshape(-1)
        if values.size > FEATURE_SAMPLE:
            values = values[:: values.size // FEATURE_SAMPLE][:FEATURE_SAMPLE]
        values = values.astype(np.float64)  # a float32 sum of squares overflows from |x| ~ 1e19
        if values.size:
            # The common case, every value finite, in four reductions (a NaN or Inf makes a sum non-finite).
            total, squares = float(values.sum()), float(values @ values)
            if math.isfinite(total) and math.isfinite(squares):
                top = max(float(values.max()), -float(values.min()))
                mean = total / values.size
                spread = math.sqrt(max(squares / values.size - mean * mean, 0.0))
                out += [_signed_log(mean), _signed_log(spread), _signed_log(top), 0.0]
                continue
        finite = values[np.isfinite(values)].astype(np.float64)
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


NONFINITE = slice(3, None, 4)  # where the non-finite shares sit in a feature vector


class RobustOutliers:
    """The outlier detector described in the module docstring."""

    def __init__(
        self,
        threshold: float = DEFAULT_THRESHOLD,
        window: int = WINDOW,
        neighbours: int = 4,
        refresh: int = 64,
    ) -> None:
        self.threshold = threshold
        self.neighbours = neighbours
        self.refresh = refresh  # the scaling and the typical distance are re-estimated every `refresh` calls
        self._window = window
        self._rings: dict[int, _Ring] = {}  # one per feature length (ops called with different input counts)

    def score(self, feature: np.ndarray) -> float:
        """How unlike the recent calls this one is, in units of the window's typical neighbour distance (0
        until MIN_HISTORY comparable calls were seen; inf for new non-finite values); then remembered."""
        ring = self._rings.get(feature.size)
        if ring is None:
            ring = self._rings[feature.size] = _Ring(np.empty((self._window, feature.size)))
        score = 0.0
        if ring.count >= MIN_HISTORY:
            if ring.age >= self.refresh or ring.inverse_scale is None:
                ring.fit(self.neighbours)
            assert ring.inverse_scale is not None
            if float(feature[NONFINITE].max(initial=0.0)) > ring.seen_nonfinite:
                score = math.inf
            else:
                # Distances to every call in the window, live (the scaling alone is refreshed periodically).
                difference = (ring.rows[: ring.count] - feature) * ring.inverse_scale
                squared = np.einsum("ij,ij->i", difference, difference)
                k = min(self.neighbours, ring.count - 1)
                score = math.sqrt(float(np.partition(squared, k)[k])) / ring.typical
        ring.append(feature)
        return score

    def is_outlier(self, feature: np.ndarray) -> bool:
        """Whether the call's feature vector scores at or above the threshold against the recent calls (see
        `score`)."""
        return self.score(feature) >= self.threshold


@dataclass
class _Ring:
    """The recent feature vectors of one kind of call, in a ring buffer, and the scaling fitted to them."""

    rows: np.ndarray
    count: int = 0
    position: int = 0
    age: int = 0  # calls since the last fit
    inverse_scale: np.ndarray | None = None
    typical: float = 1.0
    seen_nonfinite: float = 0.0

    def append(self, feature: np.ndarray) -> None:
        self.rows[self.position] = feature
        self.position = (self.position + 1) % len(self.rows)
        self.count = min(self.count + 1, len(self.rows))
        self.age += 1
        self.seen_nonfinite = max(self.seen_nonfinite, float(feature[NONFINITE].max(initial=0.0)))

    def fit(self, neighbours: int) -> None:
        window = self.rows[: self.count]
        median = np.median(window, axis=0)
        scale = np.maximum(1.4826 * np.median(np.abs(window - median), axis=0), MIN_FEATURE_SCALE)
        scaled = window / scale
        # The k-th neighbour distance of TYPICAL_FROM calls of the window (a call is its own 0-th neighbour),
        # by broadcasting: a BLAS product this small costs more in thread start-up than it saves.
        probes = scaled[:: max(1, self.count // TYPICAL_FROM)]
        pairwise = np.sqrt(((probes[:, None, :] - scaled[None, :, :]) ** 2).sum(axis=2))
        k = min(neighbours, self.count - 1)
        typical = float(np.median(np.partition(pairwise, k, axis=1)[:, k]))
        self.inverse_scale = 1.0 / scale
        # At least one feature scale: calls that sit on top of each other define no typical distance.
        self.typical = max(typical, 1.0)
        self.seen_nonfinite = float(window[:, NONFINITE].max(initial=0.0))
        self.age = 0


@dataclass
class Sampler:
    """Decides, call by call, whether to check (see the module docstring)."""

    probability: float = 0.01
    outliers: RobustOutliers | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        self._seen: set[Hashable] = set()
        self._random = random.Random(self.seed)
        if self.outliers is None:
            self.outliers = RobustOutliers()

    def decide(
        self, signature: Hashable, samples: Callable[[], Sequence[np.ndarray]] | None = None
    ) -> Reason | None:
        """The reason to check this call, or None to let it pass unchecked. `signature`: the inputs' shapes and
        dtypes; `samples`: element samples of the inputs for the outlier detector (None: no outlier test)."""
        first = not self._seen
        new = signature not in self._seen
        self._seen.add(signature)
        # Scored even when the call is checked anyway, so the detector's window sees every call.
        outlier = (
            self.outliers is not None
            and samples is not None
            and self.outliers.is_outlier(features(samples()))
        )
        if first:
            return Reason.FIRST
        if new:
            return Reason.NEW_SIGNATURE
        if outlier:
            return Reason.OUTLIER
        if self.probability > 0 and self._random.random() < self.probability:
            return Reason.RANDOM
        return None
