"""Running cases in the calling process, for `gpuemu_ci.check()` with a callable that is not importable (a
lambda or closure in a test). Same contract as the worker pool, from the same code (op_side.py and
judge_side.py): inputs from the seed in their real layouts, fp64 reference copies, out= prefill, re-run for
determinism, |x| reference.
But no isolation: a crash takes the caller down, which is what a test that calls its own kernel expects, and
Ctrl-C still stops the test (only Exception is contained here)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from gpuemu_ci.backends.interface import CaseSpec, OpTask
from gpuemu_ci.backends.judge_side import OpView, run_judge_side
from gpuemu_ci.backends.op_side import run_op_side
from gpuemu_ci.calls import CaseReport


class InProcessPool:
    """`submit(task, case)` like WorkerPool, calling `op_function` for the task's op target, and
    `reference_function` (when given; else the task's reference target, loaded) for its reference."""

    def __init__(
        self, op_function: Callable[..., Any], reference_function: Callable[..., Any] | None = None
    ) -> None:
        self.op_function = op_function
        self.reference_function = reference_function

    def close(self) -> None:
        """Nothing to release."""

    def abort(self) -> None:
        """Nothing runs in the background."""

    def submit(self, task: OpTask, case: CaseSpec) -> Future[CaseReport]:
        """Runs the case now, in the calling thread (there is nothing to overlap with)."""
        future: Future[CaseReport] = Future()
        future.set_result(self.run(task, case))
        return future

    def run(self, task: OpTask, case: CaseSpec) -> CaseReport:
        """Runs one case in this process (op, reference, judge) and returns its report."""
        function = self.op_function

        def invoke(inputs: dict[str, Any], kwargs: dict[str, Any]) -> Any:
            return function(**inputs, **kwargs)

        reference = None
        if self.reference_function is not None:
            given = self.reference_function

            def reference(inputs: dict[str, Any], kwargs: dict[str, Any]) -> Any:
                return given(**inputs, **kwargs)

        side = run_op_side(task, case, invoke=invoke, contain=Exception)
        view = OpView(
            side.op,
            side.rerun,
            side.inputs_modified,
            side.interpreter,
            side.interpreter_types,
            side.inputs_digest,
            side.skipped,
            side.triton,
            side.not_run,
            side.kernels,
        )
        report, _ = run_judge_side(task, case, view, contain=Exception, reference=reference)
        return report
