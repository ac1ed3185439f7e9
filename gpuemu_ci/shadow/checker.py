"""`Shadow`: check a running op's real calls against its fp64 reference, in the background.

The wrapped function returns its result unchanged and at once. A sample of calls (`sampling.Sampler`) is
copied and queued; one background thread runs the reference in float64 on the copied inputs and judges the
output with the same error-bound oracle and op family as the gate. A failing call is written as a capture
(an input snapshot `gpuemu-ci replay --snapshot` replays and `gpuemu-ci corpus add` pins) and reported to the
`on_failure` callback. The checker never raises into the caller unless `raise_on_failure` asks it to.
"""

from __future__ import annotations

import functools
import inspect
import queue
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import numpy as np

from gpuemu_ci.backends.judge_side import reference_run
from gpuemu_ci.backends.loading import load_target
from gpuemu_ci.calls import CallStatus, CaseRun
from gpuemu_ci.config.model import Config, Framework, OpSpec
from gpuemu_ci.errors import UsageError
from gpuemu_ci.oracle import bounds, intermediates
from gpuemu_ci.oracle.judge import CaseContext, comparator_for, judge
from gpuemu_ci.oracle.model import CaseVerdict, Comparator
from gpuemu_ci.pipeline.targets import reference_target
from gpuemu_ci.shadow.capture import CHECKER_ERRORS, record_checker_error, write_capture
from gpuemu_ci.shadow.sampling import Reason, RobustOutliers, Sampler
from gpuemu_ci.shadow.spec import dims_of, resolve_op
from gpuemu_ci.shadow.tensors import Held, element_sample, hold, is_tensor, on_device

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_CAPTURES = Path("gpuemu-captures")


class ShadowCheckFailed(AssertionError):
    """A checked call failed (raised only with `raise_on_failure`, at the next call or `drain()`)."""


class ShadowReferenceError(Exception):
    """The reference (ground truth) raised or returned nothing usable on a checked call: the call could not be
    judged. Counted in `ShadowStats.reference_errors`, never as a failure of the op."""


@dataclass(frozen=True)
class ShadowFailure:
    """What the `on_failure` callback receives."""

    op: str
    reason: Reason  # why this call was checked
    verdict: str  # the oracle's findings, in words
    capture: Path  # the input snapshot of the call
    outputs: tuple[np.ndarray, ...] = ()  # what the op returned (NumPy)
    reference_outputs: tuple[np.ndarray, ...] = ()  # what the reference returned (NumPy float64)


@dataclass
class ShadowStats:
    """Counters since the checker was made."""

    calls: int = 0
    checks: int = 0  # calls queued for checking
    checked: int = 0  # calls judged
    drops: int = 0  # calls that should have been checked but found the queue full
    failures: int = 0
    skipped: int = 0  # checked calls that could not be judged (the inputs do not fit the op's schema)
    internal_errors: int = 0
    reference_errors: int = 0  # checked calls the reference could not compute (ShadowReferenceError)
    last_error: str | None = None
    reasons: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Call:
    inputs: dict[str, Held]
    kwargs: dict[str, Any]
    outputs: tuple[Held, ...]
    reason: Reason
    torch_inputs: bool = False  # the op was handed torch tensors (a callable reference gets them too)
    contexts: tuple[str, ...] = ()  # parameters that held an autograd context (`ctx`), passed a stand-in


class Shadow:
    """A shadow checker for one op; use it as a decorator (`@Shadow("softmax")`), as a context manager (which
    starts it and, on exit, waits for the queued checks), or call `wrap(fn)`.

    `op`: an op declared in gpuemu.toml (found from the working directory, or `config`); or give `reference`
    (a callable or "pkg.mod:func") and `family` (and optionally `inputs` = {name: dims}) for an op that is
    not declared. `probability`: the random share of ordinary calls checked (first calls, new shapes and
    outliers are always checked). `outlier_threshold`: how far from the recent calls an outlier is, in units
    of their typical spacing. `device_outliers`: also look for outliers among GPU tensors (off by default:
    reading a GPU tensor's values on every call waits for the GPU; first calls, new shapes and the random
    share still work without it). `reference_gets_op_tensors`: a `reference` callable is handed what the op was
    handed (torch tensors, as float64 copies, for a torch op) instead of NumPy float64 arrays."""

    def __init__(
        self,
        op: str | None = None,
        *,
        config: str | Path | Config | None = None,
        reference: Callable[..., Any] | str | None = None,
        family: str | None = None,
        inputs: Mapping[str, tuple[str | int, ...]] | None = None,
        probability: float = 0.01,
        capture_dir: str | Path = DEFAULT_CAPTURES,
        on_failure: Callable[[ShadowFailure], None] | None = None,
        raise_on_failure: bool = False,
        queue_size: int = 64,
        outlier_threshold: float = 4.0,
        device_outliers: bool = False,
        seed: int | None = None,
        start: bool = True,
        reference_gets_op_tensors: bool = False,
    ) -> None:
        self.op, self.root, self.validation, self._reference = resolve_op(
            op, config=config, reference=reference, family=family, inputs=inputs
        )
        self.capture_dir = Path(capture_dir)
        self.on_failure = on_failure
        self.raise_on_failure = raise_on_failure
        self.stats = ShadowStats()
        self._sampler = Sampler(probability, RobustOutliers(outlier_threshold), seed)
        self.device_outliers = device_outliers
        self.reference_gets_op_tensors = reference_gets_op_tensors
        self._queue: queue.Queue[_Call | None] = queue.Queue(maxsize=queue_size)
        self._lock = threading.Lock()
        self._pending_failure: ShadowFailure | None = None
        self._running = False
        self._thread: threading.Thread | None = None
        self._observe = _outside_graphs(self._observe_call)
        if start:
            self.start()

    # --- control ----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start checking (the background thread starts with the first queued call)."""
        self._running = True

    def stop(self) -> None:
        """Stop checking: calls pass straight through; queued checks still finish (see `drain`)."""
        self._running = False

    def set_probability(self, probability: float) -> None:
        """Changes the share of calls that are checked (0 to 1) from now on; UsageError outside that range."""
        if not 0.0 <= probability <= 1.0:
            raise UsageError(f"probability must be in [0, 1], not {probability}")
        self._sampler.probability = probability

    @property
    def probability(self) -> float:
        """The share of calls that are checked (0 to 1)."""
        return self._sampler.probability

    def drain(self, timeout: float | None = None) -> None:
        """Wait until every queued check is judged (then raise a pending failure with `raise_on_failure`)."""
        if self._thread is not None:
            self._queue.join() if timeout is None else _join_with_timeout(self._queue, timeout)
        self._raise_pending()

    def __enter__(self) -> Shadow:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()
        self.drain()
        if self.stats.internal_errors:
            print(
                f"gpuemu-ci shadow: WARNING: {self.op.name}: {self.stats.internal_errors} call(s) were not judged: "
                f"the checker itself failed (last: {self.stats.last_error}); see {self.capture_dir / CHECKER_ERRORS}",
                file=sys.stderr,
            )

    # --- wrapping ---------------------------------------------------------------------------------------
    def __call__(self, fn: F) -> F:
        return self.wrap(fn)

    def wrap(self, fn: F) -> F:
        """`fn`, returning exactly what it returns, with a sample of its calls checked."""
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> Any:
            self._raise_pending()
            result = fn(*args, **kwargs)
            if self._running:
                self._observe(signature, args, kwargs, result)
            return result

        return checked  # type: ignore[return-value]

    # --- the caller's thread: cheap, and never raising ----------------------------------------------------
    def _observe_call(
        self, signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any
    ) -> None:
        try:
            with self._lock:
                self.stats.calls += 1
                bound = signature.bind_partial(*args, **kwargs).arguments
                tensors = {name: v for name, v in bound.items() if is_tensor(v)}
                values = tuple(tensors.values())
                kinds = tuple((tuple(v.shape), str(v.dtype)) for v in values)
                # Reading a GPU tensor's values waits for the GPU: outliers on a device only when asked for.
                look = self.device_outliers or not any(on_device(v) for v in values)
                reason = self._sampler.decide(
                    kinds, (lambda: [element_sample(v) for v in values]) if look else None
                )
                if reason is None:
                    return
                plain = {name: v for name, v in bound.items() if name not in tensors and not _is_ctx(v)}
                outputs = result if isinstance(result, tuple | list) else (result,)
                call = _Call(
                    {name: hold(v) for name, v in tensors.items()},
                    plain,
                    tuple(hold(o) for o in outputs if is_tensor(o)),
                    reason,
                    torch_inputs=any(not isinstance(v, np.ndarray) for v in values),
                    contexts=tuple(name for name, v in bound.items() if _is_ctx(v)),
                )
                try:
                    self._queue.put_nowait(call)
                except queue.Full:
                    self.stats.drops += 1
                    return
                self.stats.checks += 1
                self.stats.reasons[reason.value] = self.stats.reasons.get(reason.value, 0) + 1
                self._ensure_thread()
        except Exception as exc:  # the caller's training run must not die of the checker
            self._checker_failed(exc, "while taking the call")

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._work, name="gpuemu-shadow", daemon=True)
            self._thread.start()

    def _raise_pending(self) -> None:
        if self.raise_on_failure and self._pending_failure is not None:
            failure, self._pending_failure = self._pending_failure, None
            raise ShadowCheckFailed(
                f"gpuemu-ci shadow: a call of {failure.op} failed ({failure.reason.value}): "
                f"{failure.verdict.splitlines()[0]}; capture {failure.capture}"
            )

    # --- the checker's thread ----------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            call = self._queue.get()
            try:
                if call is None:
                    return
                self._check(call)
            except Exception as exc:
                self._checker_failed(exc, "while judging the call")
            finally:
                self._queue.task_done()

    def _checker_failed(self, exc: Exception, where: str) -> None:
        """An exception inside the checker (a conversion, the judge): the call was not judged. Counted, said on
        stderr (the first time and at each power of two) and appended to the capture directory's
        `checker-errors.jsonl`, never swallowed: a checker that fails silently reports 0 mismatches on a buggy
        kernel."""
        error = f"{type(exc).__name__}: {exc}"
        with self._lock:
            self.stats.internal_errors += 1
            self.stats.last_error = error
            count = self.stats.internal_errors
        record_checker_error(self.capture_dir, self.op.name, where, error, count)
        if count & (count - 1) == 0:
            print(
                f"gpuemu-ci shadow: WARNING: {self.op.name}: the checker itself failed {where} ({count} call(s) "
                f"not judged so far; see {self.capture_dir / CHECKER_ERRORS}): {error.splitlines()[0][:300]}",
                file=sys.stderr,
            )

    def _check(self, call: _Call) -> None:
        inputs = {name: held.numpy() for name, held in call.inputs.items()}
        outputs = tuple(held.numpy() for held in call.outputs)
        try:
            verdict, run = self._judged(inputs, call.kwargs, outputs, call)
        except ShadowReferenceError as exc:
            with self._lock:
                self.stats.checked += 1
                self.stats.reference_errors += 1
                self.stats.last_error = str(exc)
            print(
                f"gpuemu-ci shadow: {self.op.name}: the reference could not be computed, so this call was not "
                f"judged (not counted as the op failing): {str(exc).splitlines()[0][:300]}",
                file=sys.stderr,
            )
            return
        with self._lock:
            self.stats.checked += 1
        if verdict is None:
            with self._lock:
                self.stats.skipped += 1
            return
        if verdict.passed:
            return
        message = "\n".join(f"{f.kind.value}: {f.message}" for f in verdict.findings)
        capture = write_capture(
            self.capture_dir,
            self.op,
            inputs,
            {name: held.strides for name, held in call.inputs.items()},
            call.kwargs,
            verdict,
            reason=call.reason.value,
        )
        reference_outputs = run.reference.outputs if run is not None else ()
        failure = ShadowFailure(self.op.name, call.reason, message, capture, outputs, reference_outputs)
        with self._lock:
            self.stats.failures += 1
            self._pending_failure = failure
        if self.on_failure is not None:
            self.on_failure(failure)
        else:
            print(f"gpuemu-ci shadow: {self.op.name} failed a check; capture {capture}", file=sys.stderr)

    def _reference_invoke(
        self, contexts: tuple[str, ...] = ()
    ) -> Callable[[dict[str, Any], dict[str, Any]], Any]:
        """The reference as the judge side calls it: the function given (with a stand-in for each autograd
        context parameter it mirrors), or the op's reference target, loaded."""
        given = self._reference
        if given is None:
            return load_target(reference_target(self.op, self.root)).invoke

        def invoke(arrays: dict[str, Any], kwargs: dict[str, Any]) -> Any:
            stand_ins = {name: DetachedContext() for name in contexts}
            return given(**stand_ins, **arrays, **kwargs)

        return invoke

    def judge(
        self, inputs: Mapping[str, np.ndarray], kwargs: Mapping[str, Any], outputs: tuple[np.ndarray, ...]
    ) -> CaseVerdict | None:
        """The oracle's verdict on one call (None when the inputs do not fit the op's schema); raises
        ShadowReferenceError when the reference cannot be computed (never a verdict against the op)."""
        return self._judged(inputs, kwargs, outputs, None)[0]

    def _judged(
        self,
        inputs: Mapping[str, np.ndarray],
        kwargs: Mapping[str, Any],
        outputs: tuple[np.ndarray, ...],
        call: _Call | None,
    ) -> tuple[CaseVerdict | None, CaseRun | None]:
        dims = dims_of(self.op, inputs)
        if dims is None or not outputs:
            return None, None
        dtype = _case_dtype(self.op, inputs, outputs)
        bound = comparator_for(self.op, dtype) is Comparator.BOUND
        probed = intermediates.probed_inputs(self.op, dtype) if bound else ()
        abs_inputs = (bounds.abs_linear_inputs(self.op) or probed) if bound else ()
        # A ground truth written for the op's torch tensors gets them (float64 copies), when asked for.
        framework = (
            Framework.TORCH
            if self.reference_gets_op_tensors
            and self._reference is not None
            and call is not None
            and call.torch_inputs
            else Framework.NUMPY
        )
        invoke = self._reference_invoke(call.contexts if call is not None else ())
        run = reference_run(invoke, dict(inputs), dict(kwargs), outputs, abs_inputs, probed, framework)
        if run.reference.status is not CallStatus.OK:
            raise ShadowReferenceError(f"the reference {run.reference.status.value}: {run.reference.message}")
        if not run.reference.outputs:
            raise ShadowReferenceError("the reference returned no array")
        # Real data: no rounding-bias test (one call's values are not independent draws), and addends treated
        # as correlated (the bound's conservative g(n) = n), so a correct op is never flagged by its data.
        context = CaseContext(dtype, dims, kwargs, dict(inputs), bias_test=False, correlated=True)
        return judge(self.op, context, run, self.validation), run


def shadow(op: str | None = None, **options: Any) -> Shadow:
    """`@shadow("softmax")` — see `Shadow`."""
    return Shadow(op, **options)


def _case_dtype(op: OpSpec, inputs: Mapping[str, np.ndarray], outputs: tuple[np.ndarray, ...]) -> str:
    from gpuemu_ci.dtypes import canonical

    for array in (*inputs.values(), *outputs):
        name = canonical(array.dtype.name)
        if name is not None and name in ("float64", "float32", "float16", "bfloat16"):
            return name
    return op.output_dtype or op.dtypes[0]


class DetachedContext:
    """What a ground truth mirroring `forward(ctx, ...)` receives as `ctx`: it accepts what forward does to a
    context (attributes, save_for_backward, mark_dirty, ...) and keeps it to itself, so checking a call can
    never change what the real backward reads."""

    saved_tensors: tuple[Any, ...] = ()

    def save_for_backward(self, *tensors: Any) -> None:
        """Keeps the tensors on this context only (`saved_tensors`); the real context is untouched."""
        self.saved_tensors = tensors

    def mark_dirty(self, *tensors: Any) -> None:
        """Nothing to mark: the ground truth's inputs are copies."""

    def mark_non_differentiable(self, *tensors: Any) -> None:
        """Nothing to mark: no graph is built from the ground truth."""

    def set_materialize_grads(self, value: bool) -> None:
        """No gradients are computed from the ground truth."""


def _is_ctx(value: Any) -> bool:
    # torch.autograd.Function.forward(ctx, ...): ctx is passed through, not an input.
    return (
        type(value).__name__ in ("FunctionCtx", "BackwardCFunction") or "autograd" in type(value).__module__
    )


def _outside_graphs(function: F) -> F:
    """Under torch.compile the queueing is a graph break: it runs eagerly, outside the compiled graph."""
    torch = sys.modules.get("torch")
    compiler = getattr(torch, "compiler", None) if torch is not None else None
    disable = getattr(compiler, "disable", None)
    return disable(function) if disable is not None else function


def _join_with_timeout(work: queue.Queue[Any], timeout: float) -> None:
    import time

    deadline = time.monotonic() + timeout
    while work.unfinished_tasks and time.monotonic() < deadline:
        time.sleep(0.01)


__all__ = ["Shadow", "ShadowCheckFailed", "ShadowFailure", "ShadowStats", "shadow"]
