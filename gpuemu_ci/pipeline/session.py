"""The one object that owns the worker pool and the resolved settings: `run`, `replay`, `minimize`, `calibrate`
and `gpuemu_ci.check` all run their cases through a Session."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

from gpuemu_ci.backends.interface import CallTarget, Pool
from gpuemu_ci.config.model import Config, Framework, OpSpec
from gpuemu_ci.fuzz.case import CaseInputs
from gpuemu_ci.pipeline.op_runner import OpRunner
from gpuemu_ci.pipeline.records import CaseOutcome
from gpuemu_ci.pipeline.settings import RunOptions, Settings
from gpuemu_ci.plan.expand import plan_op
from gpuemu_ci.plan.model import CaseRef
from gpuemu_ci.progress import Observer, Silent
from gpuemu_ci.results.model import GpuInfo

DETECT = "detect"


def needs_gpu(op: OpSpec) -> bool:
    return op.execution.require_gpu or op.targets.framework is Framework.CUPY


class Session:
    """Settings resolved once, and a worker pool started on first use and closed with the session.

    `pool_factory(jobs)` replaces the worker pool (an in-process pool for `check`, a counting wrapper in the
    benchmarks); `gpu` is the detected GPU, or DETECT to ask the machine."""

    def __init__(
        self,
        config: Config,
        settings: Settings | RunOptions,
        *,
        observer: Observer | None = None,
        pool_factory: Callable[[int], Pool] | None = None,
        gpu: GpuInfo | str | None = DETECT,
    ) -> None:
        self.config = config
        self.settings = settings if isinstance(settings, Settings) else Settings.resolve(config, settings)
        self.observer = observer or Silent()
        self._pool_factory = pool_factory
        self._pool: Pool | None = None
        self._runners: dict[str, OpRunner] = {}
        if isinstance(gpu, str):
            from gpuemu_ci.backends import detect_gpu

            gpu = detect_gpu()
        self.gpu: GpuInfo | None = gpu

    @property
    def out_dir(self) -> Path:
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

    def close(self) -> None:
        """Stop the workers (idempotent)."""
        self._runners.clear()
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    # --- cases ------------------------------------------------------------------------------------------
    def plan(
        self, op: OpSpec, dtypes: Sequence[str] | None = None, iterations: int | None = None
    ) -> list[CaseRef]:
        """The cases of `op` this session's suite runs (or `iterations` per dtype of `dtypes`)."""
        chosen = self.settings.dtypes_for(self.config, op) if dtypes is None else tuple(dtypes)
        return plan_op(op, self.settings.seed, chosen, iterations or self.settings.iterations)

    def runner(
        self,
        op: OpSpec,
        *,
        target: CallTarget | None = None,
        deadline: float | None = None,
        out_dir: Path | None = None,
    ) -> OpRunner:
        """An OpRunner for `op` on this session's pool (`target` replaces the op's own, e.g. a CUDA kernel)."""
        return OpRunner(
            self.config,
            op,
            self.pool,
            out_dir or self.out_dir,
            self.settings.seed,
            self.observer,
            deadline,
            target,
            require_gpu=self.settings.require_gpu,
        )

    def run_case(
        self, op: OpSpec, ref: CaseRef, inputs: CaseInputs | None = None, target: CallTarget | None = None
    ) -> CaseOutcome:
        """Runs and judges one case (built from its seed unless `inputs` is given), waiting for it; `target`
        replaces the op's own (a function checked with `gpuemu_ci.check`)."""
        runner = self._runners.get(op.name)
        if runner is None or runner.op is not op or runner.target is not target:
            runner = self._runners[op.name] = self.runner(op, target=target)
        return runner.run_case(ref, inputs=inputs)
