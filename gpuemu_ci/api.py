"""The Python API for the client-side workflow: fuzz a callable from your own tests with an op's schema.

    import gpuemu_ci

    def test_my_softmax():
        gpuemu_ci.check("softmax", my_softmax, config="gpuemu.toml")   # AssertionError with replay seeds

The op's dims, inputs, dtypes, family, kwargs and reference come from the config; `fn` replaces its `op`.
An importable function (module level) runs in an isolated worker; a lambda or closure runs in this process.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuemu_ci.backends.interface import Pool
from gpuemu_ci.config.load import load_config
from gpuemu_ci.config.model import Config, ExecutionMode, Suite
from gpuemu_ci.errors import UsageError
from gpuemu_ci.pipeline.session import Session
from gpuemu_ci.pipeline.settings import RunOptions, select_ops
from gpuemu_ci.results.model import OpResult, OpStatus


class OpCheckFailed(AssertionError):
    """Raised by `check` when the callable fails (or could not be judged); carries the OpResult."""

    def __init__(self, message: str, result: OpResult) -> None:
        super().__init__(message)
        self.result = result


def _importable_name(fn: Callable[..., Any]) -> str | None:
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or "<" in qualname or module == "__main__":
        return None
    try:
        target: Any = importlib.import_module(module)
        for part in qualname.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError):
        return None
    return f"{module}:{qualname}" if target is fn else None


def check(
    op_name: str,
    fn: Callable[..., Any],
    *,
    config: str | Path | Config | None = None,
    suite: str = "quick",
    seed: int | None = None,
    iterations: int | None = None,
    dtypes: Sequence[str] = (),
    out_dir: str | Path = "gpuemu-out",
    isolate: bool | None = None,
) -> OpResult:
    """Fuzzes `fn` with the schema of op `op_name` and judges it against the op's fp64 reference.

    Returns the OpResult when every case passed; raises OpCheckFailed (an AssertionError) listing each
    failure with its replay command otherwise, and also when no case ran or a case could not be judged."""
    loaded = (
        config if isinstance(config, Config) else load_config(Path(config) if config is not None else None)
    )
    op = select_ops(loaded, [op_name])[0]
    target = _importable_name(fn)
    use_worker = target is not None if isolate is None else isolate
    if use_worker and target is None:
        raise UsageError(
            f"{fn!r} is not importable as module:function, so it cannot run in an isolated "
            "worker; pass isolate=False"
        )
    op = replace(
        op,
        targets=replace(
            op.targets,
            op=target or f"<in-process>:{getattr(fn, '__name__', 'fn')}",
            execution_mode=ExecutionMode.CALLABLE,
        ),
    )
    options = RunOptions(
        suite=Suite(suite),
        seed=seed,
        iterations=iterations,
        dtypes=tuple(dtypes),
        out_dir=Path(out_dir).resolve(),
        jobs=1,
    )
    with Session(loaded, options, pool_factory=None if use_worker else _in_process(fn)) as session:
        result = session.runner(op).run(session.plan(op))
    if result.status is not OpStatus.PASSED:
        raise OpCheckFailed(_failure_text(op_name, result, session.settings.seed), result)
    return result


def _in_process(fn: Callable[..., Any]) -> Callable[[int], Pool]:
    def factory(jobs: int) -> Pool:
        from gpuemu_ci.backends.inprocess import InProcessPool

        return InProcessPool(fn)

    return factory


def _failure_text(op_name: str, result: OpResult, master: int) -> str:
    lines = [
        f"gpuemu-ci: {op_name} {result.status.value}: {result.cases_failed} failed, "
        f"{result.cases_errored} errored of {result.cases_total} cases (master seed {master})"
    ]
    if result.message:
        lines.append(result.message)
    for failure in result.failures[:10]:
        shapes = ", ".join(f"{k}{tuple(v)}" for k, v in failure.shapes.items())
        lines.append(
            f"- {failure.kind} [{failure.dtype}] {shapes} {failure.distribution}: "
            f"{failure.message.splitlines()[0][:300]}"
        )
        lines.append(f"  replay: {failure.replay}")
    return "\n".join(lines)
