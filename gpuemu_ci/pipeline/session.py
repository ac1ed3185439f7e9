"""The one object that owns the worker pool and the resolved settings: `run`, `replay`, `minimize`, `calibrate`
and `gpuemu_ci.check` all run their cases through a Session."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

from gpuemu_ci.backends.interface import CallTarget, CaseSpec, OpTask, Pool
from gpuemu_ci.calls import CaseReport
from gpuemu_ci.config.model import Config, Framework, OpSpec
from gpuemu_ci.errors import InfraError
from gpuemu_ci.pipeline.op_runner import OpPlan, SuiteRun
from gpuemu_ci.pipeline.settings import RunOptions, Settings
from gpuemu_ci.pipeline.targets import naive_target, op_target, reference_target
from gpuemu_ci.plan.expand import plan_op
from gpuemu_ci.plan.model import CaseRef
from gpuemu_ci.progress import Observer, Silent
from gpuemu_ci.results.model import GpuInfo, OpResult

DETECT = "detect"


# Said wherever a HIP kernel's launch does not run (every machine, for now): why, and what still ran.
HIP_LAUNCH_UNSUPPORTED = (
    "gpuemu-ci does not launch HIP kernels yet (their lint runs everywhere; fuzzing them against the reference "
    "needs an AMD GPU and a launch path tested on one)"
)


def needs_gpu(op: OpSpec) -> bool:
    """Whether the op cannot run without an NVIDIA GPU (it asks for one, or runs on CuPy)."""
    return op.execution.require_gpu or op.targets.framework is Framework.CUPY


class Session:
    """Settings resolved once, and a worker pool started on first use and closed with the session.

    `pool_factory(jobs)` replaces the worker pool (an in-process pool for `check`); `gpu` is the detected GPU,
    or DETECT to ask the machine (`stop`, a signal, cuts that short)."""

    def __init__(
        self,
        config: Config,
        settings: Settings | RunOptions,
        *,
        observer: Observer | None = None,
        pool_factory: Callable[[int], Pool] | None = None,
        gpu: GpuInfo | str | None = DETECT,
        stop: threading.Event | None = None,
    ) -> None:
        self.config = config
        self.settings = settings if isinstance(settings, Settings) else Settings.resolve(config, settings)
        self.observer = observer or Silent()
        self._pool_factory = pool_factory
        self._pool: Pool | None = None
        self._tasks: dict[tuple[int, CallTarget | None], OpTask] = {}
        if isinstance(gpu, str):
            from gpuemu_ci.backends import detect_gpu

            gpu = detect_gpu(stop=stop)  # a signal ends the detection at once (the run stops)
        self.gpu: GpuInfo | None = gpu

    @property
    def out_dir(self) -> Path:
        """Where the run writes results.json, snapshots and reports."""
        return self.settings.out_dir

    @property
    def pool(self) -> Pool:
        """The worker pool, started on first use."""
        if self._pool is None:
            if self._pool_factory is not None:
                self._pool = self._pool_factory(self.settings.jobs)
            else:
                from gpuemu_ci.backends import WorkerPool

                self._pool = WorkerPool(
                    self.settings.jobs,
                    root=self.config.root,
                    env=self.settings.extra_env or None,
                    gpu=self.gpu,
                )
        return self._pool

    def start(self) -> None:
        """Start the workers now (they boot while the caller plans)."""
        _ = self.pool

    def close(self) -> None:
        """Stop the workers (idempotent)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def abort(self) -> None:
        """Stop the workers at once, killing what runs."""
        if self._pool is not None:
            self._pool.abort()
            self._pool = None

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if error is not None:
            self.abort()  # an exception (Ctrl-C included) must not wait for queued cases
        self.close()

    # --- cases ------------------------------------------------------------------------------------------
    def plan(
        self, op: OpSpec, dtypes: Sequence[str] | None = None, iterations: int | None = None
    ) -> list[CaseRef]:
        """The cases of `op` this session's suite runs (or `iterations` per dtype of `dtypes`)."""
        chosen = self.settings.dtypes_for(self.config, op) if dtypes is None else tuple(dtypes)
        extra = self.settings.extra_iterations if iterations is None else None
        return plan_op(
            op, self.settings.seed, chosen, iterations or self.settings.iterations, self.settings.suite, extra
        )

    def task(self, op: OpSpec, target: CallTarget | None = None, *, out_dir: Path | None = None) -> OpTask:
        """What the workers need to run and judge `op`'s cases (`target` replaces the op's own, e.g. a CUDA
        kernel)."""
        key = (id(op), target)
        task = self._tasks.get(key)
        if task is None:
            root = self.config.root
            task = self._tasks[key] = OpTask(
                key=f"{op.name}/{len(self._tasks)}",
                op=op,
                validation=self.config.validation,
                root=root,
                op_target=target or self._kernel_target(op) or op_target(op, root),
                reference=reference_target(op, root),
                naive=naive_target(op, root),
                timeout_s=op.execution.timeout_s or self.config.ci.case_timeout,
                master_seed=self.settings.seed,
                out_dir=out_dir or self.out_dir,
            )
        return task

    def lacks_gpu(self, op: OpSpec) -> bool:
        """The op needs an NVIDIA GPU and this machine has none. A HIP kernel's launch is not counted here:
        `task` refuses it, with its own reason."""
        return needs_gpu(op) and self.gpu is None and not op.execution.amd_gpu

    def _kernel_target(self, op: OpSpec) -> CallTarget | None:
        """A launchable [[kernels]] entry's CuPy launch, when `op` is one (their names differ from every op's).
        A HIP kernel's launch is refused here, for every command that would run one (InfraError, exit 3)."""
        if op.execution.amd_gpu:
            raise InfraError(f"{op.name} is a HIP kernel's launch: {HIP_LAUNCH_UNSUPPORTED}")
        for kernel in self.config.kernels:
            if kernel.op is not None and kernel.launch is not None and kernel.op.name == op.name:
                from gpuemu_ci.backends.cuda import (
                    kernel_target,  # the launch planner, only when a kernel runs
                )

                return kernel_target(kernel, self.config.root)
        return None

    def run_ops(
        self,
        plans: Sequence[tuple[OpSpec, Sequence[CaseRef], CallTarget | None]],
        *,
        deadline: float | None = None,
        stop: threading.Event | None = None,
    ) -> tuple[dict[str, OpResult], bool]:
        """Every op's result (by name) and whether the run was cut short (the deadline or `stop`)."""
        run = SuiteRun(
            self.config,
            lambda: self.pool,
            self.observer,
            jobs=self.settings.jobs,
            deadline=deadline,
            stop=stop,
            require_gpu=self.settings.require_gpu,
        )
        results = run.run([OpPlan(op, self.task(op, target), cases) for op, cases, target in plans])
        return results, run.cut_short

    def run_op(self, op: OpSpec, cases: Sequence[CaseRef], target: CallTarget | None = None) -> OpResult:
        """One op's cases -> its OpResult."""
        results, _ = self.run_ops([(op, cases, target)])
        return results[op.name]

    def run_case(self, op: OpSpec, case: CaseSpec, target: CallTarget | None = None) -> CaseReport:
        """Runs and judges one case, waiting for it (`target` replaces the op's own: a function checked with
        `gpuemu_ci.check`)."""
        return self.pool.submit(self.task(op, target), case).result()
