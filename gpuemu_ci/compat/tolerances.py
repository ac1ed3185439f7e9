"""Upstream's `gpuemu.tolerances.calibrate_tolerance`: tolerances measured from a test function against a
reference on random inputs (the 99th percentile of the per-sample worst difference, times a safety margin).

gpuemu-ci's gate does not need it: an op with a `family` is judged by an error bound that scales with its
shapes and magnitudes, which percentile-calibrated tolerances do not (they are measured at one shape and one
input distribution). It is here so that code calling it keeps working, and its result can be written into
[ops.tolerances] as an explicit opt-in (`gpuemu-ci calibrate --percentile` does that from a real run)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuemu_ci import dtypes

RELATIVE_FLOOR = 1e-10  # |reference| + this divides the difference (upstream's guard against zero)


@dataclass(frozen=True)
class ToleranceResult:
    """Tolerances derived from sample runs: the atol and rtol to use, and the worst absolute and relative
    difference of each sample they were derived from."""

    atol: float
    rtol: float
    max_abs: tuple[float, ...]  # the worst absolute difference of each sample
    max_rel: tuple[float, ...]


def calibrate_tolerance(
    reference_fn: Callable[..., Any],
    test_fn: Callable[..., Any],
    input_shapes: Sequence[tuple[int, ...]],
    dtype: str = "float32",
    n_samples: int = 100,
    seed: int = 42,
    percentile: float = 99.0,
    safety_margin: float = 2.0,
) -> ToleranceResult:
    """Upstream's calling convention: one standard-normal input per shape (NumPy's default_rng(seed)), given
    positionally to both functions, `n_samples` times; atol and rtol are the `percentile` of the per-sample
    worst absolute and relative differences times `safety_margin`."""
    name = dtypes.canonical(dtype)
    if name is None or not dtypes.info(name).is_float:
        raise ValueError(f"dtype {dtype!r} is not a float dtype gpuemu-ci knows")
    if n_samples < 1 or not 0 <= percentile <= 100 or safety_margin <= 0:
        raise ValueError("n_samples must be >= 1, percentile in [0, 100] and safety_margin > 0")
    numpy_dtype = dtypes.info(name).numpy
    rng = np.random.default_rng(seed)
    worst_abs: list[float] = []
    worst_rel: list[float] = []
    for _ in range(n_samples):
        args = [rng.standard_normal(shape).astype(numpy_dtype) for shape in input_shapes]
        reference = np.asarray(reference_fn(*args), dtype=np.float64)
        tested = np.asarray(test_fn(*args), dtype=np.float64)
        if reference.shape != tested.shape:
            raise ValueError(f"test_fn returned shape {tested.shape}, reference_fn {reference.shape}")
        difference = np.abs(tested - reference)
        worst_abs.append(float(difference.max(initial=0.0)))
        worst_rel.append(float((difference / (np.abs(reference) + RELATIVE_FLOOR)).max(initial=0.0)))
    return ToleranceResult(
        atol=float(np.percentile(worst_abs, percentile)) * safety_margin,
        rtol=float(np.percentile(worst_rel, percentile)) * safety_margin,
        max_abs=tuple(worst_abs),
        max_rel=tuple(worst_rel),
    )
