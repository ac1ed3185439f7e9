"""The Python API for the client-side workflow: fuzz a callable from your own tests with an op's schema.

    import gpuemu_ci

    def test_my_softmax():
        gpuemu_ci.check("softmax", my_softmax, config="gpuemu.toml")   # AssertionError with replay commands

The op's dims, inputs, dtypes, family, kwargs and reference come from the config; `fn` replaces its `op`.
A function defined at module level (a test module's too) runs in an isolated worker, imported the way pytest
imported it; a lambda or closure runs in this process. A failure names the cases and how to replay them:
`gpuemu-ci replay ... --target MODULE:FUNCTION` for an importable function, `check(..., seeds=[...])` for the
others.
"""

from __future__ import annotations

import importlib
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec

from gpuemu_ci.backends.interface import CallTarget, Pool, TargetKind
from gpuemu_ci.config.load import load_config
from gpuemu_ci.config.model import Config, ExecutionMode, Suite
from gpuemu_ci.errors import UsageError
from gpuemu_ci.pipeline.session import Session
from gpuemu_ci.pipeline.settings import RunOptions, Settings, select_ops
from gpuemu_ci.plan.model import CaseRef
from gpuemu_ci.render.describe import describe_inputs
from gpuemu_ci.results.model import OpResult, OpStatus

DEFAULT_OUT_DIR = Path("gpuemu-out")  # the pytest plugin points this at pytest's temporary directory


class OpCheckFailed(AssertionError):
    """Raised by `check` when the callable fails (or could not be judged); carries the OpResult."""

    def __init__(self, message: str, result: OpResult) -> None:
        super().__init__(message)
        self.result = result


def importable_target(fn: Callable[..., Any]) -> tuple[str, Path] | None:
    """("package.module:qualname", the directory to import it from) for a module-level function; None for a
    lambda, a closure or a function of `__main__`. A module pytest imported from a test folder is found the
    way pytest found it: from the first parent directory that is not a package."""
    module_name, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module_name or "<" in qualname or module_name == "__main__":
        return None
    module = sys.modules.get(module_name) or _import(module_name)
    if module is None:
        return None
    target: Any = module
    for part in qualname.split("."):
        target = getattr(target, part, None)
    if target is not fn:
        return None
    file = getattr(module, "__file__", None)
    if not file:
        return None
    base = Path(file).resolve().parent
    for _ in module_name.split(".")[:-1]:
        base = base.parent
    return f"{module_name}:{qualname}", base


def target_from_text(text: str) -> tuple[str, Path]:
    """`--target` of `gpuemu-ci replay`: "pkg.mod:function" (imported from the working directory) or
    "path/to/file.py:function" (imported as pytest would: from the first parent that is not a package)."""
    module_part, sep, attribute = text.partition(":")
    if not sep or not module_part or not attribute:
        raise UsageError(f"--target {text!r}: expected package.module:function or path/to/file.py:function")
    if not module_part.endswith(".py"):
        return text, Path.cwd()
    path = Path(module_part).resolve()
    if not path.is_file():
        raise UsageError(f"--target {text!r}: {path} does not exist")
    parts = [path.stem]
    base = path.parent
    while (base / "__init__.py").is_file():
        parts.insert(0, base.name)
        base = base.parent
    return f"{'.'.join(parts)}:{attribute}", base


def check(
    op_name: str,
    fn: Callable[..., Any] | None = None,
    *,
    config: str | Path | Config | None = None,
    suite: str = "quick",
    seed: int | None = None,
    seeds: Sequence[int] = (),
    iterations: int | None = None,
    dtypes: Sequence[str] = (),
    out_dir: str | Path | None = None,
    isolate: bool | None = None,
    shared: SharedSessions | None = None,
) -> OpResult:
    """Fuzzes `fn` with the schema of op `op_name` and judges it against the op's fp64 reference (without
    `fn`: the op as the config declares it, in an isolated worker, as the gate runs it).

    `seeds`: run exactly these case seeds (from a failure) instead of the suite. `shared`: run in its open
    session (one worker pool for many checks, as the pytest plugin does) instead of a session of its own; an
    in-process function still gets its own. Returns the OpResult when
    every case passed; raises OpCheckFailed (an AssertionError) listing each failure with how to replay it
    otherwise, and also when no case ran or a case could not be judged."""
    __tracebackhide__ = True  # pytest shows the message, not gpuemu-ci's frames
    loaded = (
        config if isinstance(config, Config) else load_config(Path(config) if config is not None else None)
    )
    op = select_ops(loaded, [op_name])[0]
    found = importable_target(fn) if fn is not None else None
    use_worker = fn is None or (found is not None if isolate is None else isolate)
    target = None
    if fn is not None:
        if use_worker and found is None:
            raise UsageError(
                f"{fn!r} is not importable as module:function, so it cannot run in an isolated worker; "
                "pass isolate=False"
            )
        op = replace(
            op,
            targets=replace(
                op.targets,
                op=found[0] if found else f"<in-process>:{getattr(fn, '__name__', 'fn')}",
                execution_mode=ExecutionMode.CALLABLE,
            ),
        )
        if found and use_worker:
            target = CallTarget(TargetKind.CALLABLE, found[0], found[1], op.targets.framework)
    options = RunOptions(
        suite=Suite(suite),
        seed=seed,
        iterations=iterations,
        dtypes=tuple(dtypes),
        out_dir=Path(out_dir if out_dir is not None else DEFAULT_OUT_DIR).resolve(),
        jobs=1,
    )
    pool_factory = None if use_worker or fn is None else _in_process(fn)
    if shared is not None and pool_factory is None:
        session = shared.session(loaded, options)
        chosen = Settings.resolve(loaded, options).dtypes_for(loaded, op)  # what a session of its own plans
        cases = [CaseRef(op.name, -1, s) for s in seeds] if seeds else session.plan(op, chosen)
        result = session.run_op(op, cases, target)
    else:
        with Session(loaded, options, pool_factory=pool_factory) as session:
            cases = [CaseRef(op.name, -1, s) for s in seeds] if seeds else session.plan(op)
            result = session.run_op(op, cases, target)
    if fn is not None:  # the config's op keeps the gate's own replay commands
        result = _with_replays(result, loaded, op_name, found if use_worker else None)
    if result.status is not OpStatus.PASSED:
        raise OpCheckFailed(_failure_text(op_name, result, session.settings.seed), result)
    if result.cases_skipped and not loaded.ci.allow_skips:  # nothing that did not run counts as passed
        raise OpCheckFailed(
            f"{op_name}: {result.cases_skipped} of {result.cases_total} cases were not judged here "
            f"({result.message or 'skipped'}); skipped cases never count as passed (`[ci] allow_skips = true` "
            "accepts them)",
            result,
        )
    return result


class SharedSessions:
    """Sessions kept open across checks: one per (config file, suite, seed, iterations), each with one worker
    pool started once, sized as `gpuemu-ci run` sizes it (ci.parallel_jobs, else the cores). The pytest plugin
    keeps one for the whole test run, so its items do not each start (and import into) a pool of their own.
    The snapshots of failing cases go to `out_dir`. Close it when done."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self._open: dict[tuple[Path, str, int | None, int | None], Session] = {}

    def session(self, loaded: Config, options: RunOptions) -> Session:
        """The open session for `loaded` with `options`' suite, seed and iterations; started (its pool up) on
        first use."""
        key = (loaded.path.resolve(), options.suite.value, options.seed, options.iterations)
        session = self._open.get(key)
        if session is None:
            shared = replace(options, dtypes=(), jobs=None, out_dir=self.out_dir)
            session = self._open[key] = Session(loaded, shared)
            session.start()
        return session

    def close(self) -> None:
        """Closes every session and its worker pool."""
        while self._open:
            _, session = self._open.popitem()
            session.close()


def _with_replays(result: OpResult, config: Config, op_name: str, found: tuple[str, Path] | None) -> OpResult:
    """Each failure's replay runs the function that was checked, not the op's own."""
    failures = []
    for failure in result.failures:
        if found is not None:
            module, function = found[0].split(":", 1)
            file = found[1] / (module.replace(".", "/") + ".py")
            spec = f"{file}:{function}" if file.is_file() else found[0]
            command = (
                f"gpuemu-ci replay --config {shlex.quote(str(config.path))} --op {shlex.quote(op_name)} "
                f"--seed {failure.case_seed} --target {shlex.quote(spec)}"
            )
        else:
            command = f"gpuemu_ci.check({op_name!r}, <the same function>, seeds=[{failure.case_seed}])"
        failures.append(msgspec.structs.replace(failure, replay=command))
    return msgspec.structs.replace(result, failures=tuple(failures))


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


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
        # The inputs as the CLI describes them: a stride bug fails only on the layouts named here.
        inputs = describe_inputs(failure.shapes, failure.strides, failure.layouts)
        lines.append(
            f"- {failure.kind} [{failure.dtype}] {inputs} {failure.distribution} seed {failure.case_seed}: "
            f"{failure.message.splitlines()[0][:300] if failure.message else failure.kind}"
        )
        if failure.pattern:
            lines.append(f"  pattern: {failure.pattern}")
        if failure.where:
            lines.append(f"  where: {failure.where}")
        lines.append(f"  replay: {failure.replay}")
    return "\n".join(lines)
