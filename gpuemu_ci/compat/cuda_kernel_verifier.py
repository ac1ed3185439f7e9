"""cuda-kernel-verifier's API on gpuemu-ci's shadow checker: `from gpuemu_ci.compat.cuda_kernel_verifier import
equivalent, EquivalenceChecker, FailureCallbackArgs` in place of `from cuda_kernel_verifier import ...`.

    @equivalent(ground_truth, on_mismatch, rtol=1e-1, atol=1e-6)
    def my_fast_row_sum(x): ...

    EquivalenceChecker.start(execution_sample_probability=0.5)
    ...
    EquivalenceChecker.stop()

As there: the decorated function returns its own result at once; a sample of calls (always the first call and
each new shape or dtype, outliers, and `execution_sample_probability` of the rest) is checked in a background
thread by calling the ground truth with what the call received (torch tensors for a torch op, as float64 copies;
`ctx` for an autograd Function's forward, as a stand-in that keeps what the ground truth does to it); a
mismatch calls `failure_callback(FailureCallbackArgs(original_result, ground_truth_result))`. Nothing is checked
before `EquivalenceChecker.start()`.

Where gpuemu-ci differs: the comparison is allclose with the given rtol/atol against the float64 ground truth
(|y - r| <= atol + rtol |r|, NaN where the ground truth has NaN), each failing call is also written as a replayable
capture (gpuemu-captures/), and a ground truth that raises is a reference error (counted in `stats`, said on
stderr), never the kernel failing. An exception raised by the failure callback (the README's raises
AssertionError) is re-raised by `EquivalenceChecker.stop()`.
"""

from __future__ import annotations

import functools
import math
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np

from gpuemu_ci.config.model import ErrorModel, OpShapes, OpSpec, OpTargets, Tolerance, Validation
from gpuemu_ci.dtypes import DTYPES
from gpuemu_ci.errors import UsageError
from gpuemu_ci.shadow.checker import Shadow, ShadowFailure, ShadowStats
from gpuemu_ci.shadow.sampling import Sampler

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class FailureCallbackArgs:
    """What the failure callback receives: the kernel's output and the ground truth's (torch tensors when torch
    is importable, else NumPy arrays)."""

    original_result: Any
    ground_truth_result: Any


class ExponentialRunningCentroidExecutionOutlierDetector:
    """cuda-kernel-verifier's detector, with its parameters and algorithm, on gpuemu-ci's per-call features
    (log-magnitudes of each input's mean, spread and largest value): a running centroid (exponential moving
    average, `exponential_alpha`), each call's distance to it kept in a window of `max_distances`, and a call
    is an outlier when its distance over the `percentile` quantile of the window is at least
    `outlier_threshold`. The first call is one."""

    def __init__(
        self,
        percentile: float = 0.95,
        max_distances: int = 10_000,
        exponential_alpha: float = 1e-2,
        outlier_threshold: float = 0.8,
    ) -> None:
        if not 0 < percentile <= 1 or max_distances < 1 or not 0 < exponential_alpha <= 1:
            raise UsageError("percentile in (0, 1], max_distances >= 1 and exponential_alpha in (0, 1]")
        self.percentile = percentile
        self.max_distances = max_distances
        self.exponential_alpha = exponential_alpha
        self.outlier_threshold = outlier_threshold
        self.reset()

    def reset(self) -> None:
        """Forgets every call seen: the next call is an outlier again."""
        self._centroid: np.ndarray | None = None
        self._distances: list[float] = []

    def is_outlier(self, feature: np.ndarray) -> bool:
        """Feeds one call's feature vector and says whether it is an outlier (the first call, one of another
        shape, or a non-finite distance always is)."""
        if self._centroid is None or self._centroid.shape != feature.shape:
            self._centroid = feature.astype(np.float64, copy=True)
            return True
        self._centroid = self.exponential_alpha * feature + (1 - self.exponential_alpha) * self._centroid
        distance = float(np.linalg.norm(feature - self._centroid))
        self._distances = [*self._distances, distance][-self.max_distances :]
        scale = float(np.quantile(self._distances, self.percentile))
        if not math.isfinite(distance):
            return True
        return scale > 0 and distance / scale >= self.outlier_threshold


class EquivalenceChecker:
    """The class-level switch over every `@equivalent` function (as cuda-kernel-verifier's singleton)."""

    _checkers: ClassVar[list[_Equivalent]] = []
    _running: ClassVar[bool] = False
    _probability: ClassVar[float] = 0.5
    _lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def start(cls, max_execution_queue_size: int = 0, execution_sample_probability: float = 0.5) -> None:
        """Start checking (outlier detectors reset); a queue size of 0 is unbounded, as there."""
        _check_probability(execution_sample_probability)
        with cls._lock:
            cls._running = True
            cls._probability = execution_sample_probability
            for checker in cls._checkers:
                checker.restart(max_execution_queue_size, execution_sample_probability)

    @classmethod
    def stop(cls) -> None:
        """Stop checking and wait for the queued checks; re-raises what a failure callback raised."""
        with cls._lock:
            cls._running = False
            checkers = list(cls._checkers)
        for checker in checkers:
            checker.shadow.stop()
        for checker in checkers:
            checker.shadow.drain()
        for checker in checkers:
            checker.raise_callback_error()

    @classmethod
    def is_running(cls) -> bool:
        """Whether checking is on (between `start()` and `stop()`), for every checker of the process."""
        return cls._running

    @classmethod
    def set_execution_sample_probability(cls, p: float) -> None:
        """Sets the share of calls checked (0 to 1) for every checker, the existing ones and those made later;
        UsageError outside that range."""
        _check_probability(p)
        with cls._lock:
            cls._probability = p
            for checker in cls._checkers:
                checker.shadow.set_probability(p)

    @classmethod
    def _register(cls, checker: _Equivalent) -> None:
        with cls._lock:
            cls._checkers.append(checker)
            if cls._running:
                checker.restart(0, cls._probability)


def _check_probability(p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise UsageError(f"execution_sample_probability must be in [0, 1], not {p}")


class _Equivalent:
    """One decorated function: its shadow checker, set up as cuda-kernel-verifier's decorator is."""

    def __init__(
        self,
        fn: Callable[..., Any],
        ground_truth: Callable[..., Any],
        failure_callback: Callable[[FailureCallbackArgs], None] | None,
        rtol: float,
        atol: float,
        outlier_detector: Any | None,
    ) -> None:
        self.failure_callback = failure_callback
        self.callback_error: BaseException | None = None
        self.outlier_detector = outlier_detector
        self.shadow = Shadow(
            reference=ground_truth,
            family="exact",  # replaced below by allclose with the given tolerances
            start=False,
            on_failure=self._on_failure,
            reference_gets_op_tensors=True,
            capture_dir=Path("gpuemu-captures"),
        )
        tolerance = Tolerance(atol=atol, rtol=rtol)
        self.shadow.op = _allclose_op(getattr(fn, "__qualname__", "kernel"), tolerance)
        self.shadow.validation = Validation()

    @property
    def stats(self) -> ShadowStats:
        return self.shadow.stats

    def restart(self, queue_size: int, probability: float) -> None:
        shadow = self.shadow
        shadow.drain()
        shadow._queue = queue.Queue(maxsize=queue_size)
        detector = self.outlier_detector
        if detector is not None and hasattr(detector, "reset"):
            detector.reset()
        shadow._sampler = Sampler(probability, detector if detector is not None else None)
        shadow.start()

    def _on_failure(self, failure: ShadowFailure) -> None:
        if self.failure_callback is None:
            print(
                f"gpuemu-ci: {failure.op} diverged from its ground truth: {failure.verdict.splitlines()[0]}"
            )
            return
        args = FailureCallbackArgs(_tensor(failure.outputs), _tensor(failure.reference_outputs))
        try:
            self.failure_callback(args)
        except BaseException as exc:  # re-raised by EquivalenceChecker.stop(), in the caller's thread
            if self.callback_error is None:
                self.callback_error = exc

    def raise_callback_error(self) -> None:
        error, self.callback_error = self.callback_error, None
        if error is not None:
            raise error


def _allclose_op(name: str, tolerance: Tolerance) -> OpSpec:
    floats = tuple((dtype, tolerance) for dtype, info in DTYPES.items() if info.is_float)
    return OpSpec(
        name=name,
        dtypes=("float32",),
        targets=OpTargets(op="<decorated>", reference="<ground truth>"),
        shapes=OpShapes(inputs=(), dims=()),
        error_model=ErrorModel(family=None, tolerances=floats),
    )


def _tensor(arrays: tuple[np.ndarray, ...]) -> Any:
    value: Any = arrays[0] if len(arrays) == 1 else arrays
    try:
        import torch
    except ImportError:
        return value
    if isinstance(value, tuple):
        return tuple(torch.from_numpy(np.ascontiguousarray(a).astype(_torchable(a))) for a in value)
    return torch.from_numpy(np.ascontiguousarray(value).astype(_torchable(value)))


def _torchable(array: np.ndarray) -> np.dtype:
    return np.dtype(np.float32) if array.dtype.name == "bfloat16" else array.dtype


def equivalent(
    ground_truth_function: Callable[..., Any],
    failure_callback: Callable[[FailureCallbackArgs], None] | None = None,
    *,
    rtol: float = 1e-2,
    atol: float = 1e-8,
    outlier_detector: Any | None = None,
) -> Callable[[F], F]:
    """cuda-kernel-verifier's decorator factory (see the module docstring)."""
    if rtol < 0 or atol < 0:
        raise UsageError("rtol and atol must not be negative")

    def decorate(fn: F) -> F:
        checker = _Equivalent(fn, ground_truth_function, failure_callback, rtol, atol, outlier_detector)
        EquivalenceChecker._register(checker)
        wrapped = checker.shadow.wrap(fn)
        functools.update_wrapper(wrapped, fn)
        wrapped.equivalence = checker  # type: ignore[attr-defined]
        return wrapped

    return decorate


__all__ = [
    "EquivalenceChecker",
    "ExponentialRunningCentroidExecutionOutlierDetector",
    "FailureCallbackArgs",
    "equivalent",
]
