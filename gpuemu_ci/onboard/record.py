"""Recording an op's real calls: the function named `pkg.mod:func` is replaced, in its module, by a wrapper that
returns exactly what the function returns and writes the facts of each new kind of call (facts.py) as one JSON
line. The replacement happens when the module is first imported (an import hook), so code that does
`from pkg.mod import func` afterwards gets the wrapper too."""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import inspect
import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from gpuemu_ci.onboard.facts import ENCODER, CallFacts, args_facts, outputs_facts

MAX_CALLS = 200  # distinct kinds of call written; a training loop's millionth call adds nothing


def split_target(target: str) -> tuple[str, str]:
    """`pkg.mod:func` (or `pkg.mod:Class.apply`) -> ("pkg.mod", "func")."""
    module, sep, attribute = target.partition(":")
    if not sep or not module or not attribute:
        raise ValueError(f"the op must look like 'package.module:function', not {target!r}")
    return module, attribute


def parameter_names(owner: Any, attribute: str, fn: Callable[..., Any]) -> inspect.Signature | None:
    """The signature calls are bound to: the function's, or for `Function.apply` the forward's without ctx."""
    if attribute.endswith("apply") and hasattr(owner, "forward"):
        forward = inspect.signature(owner.forward)
        return forward.replace(parameters=list(forward.parameters.values())[1:])
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _bound(
    signature: inspect.Signature | None, args: Sequence[Any], kwargs: dict[str, Any]
) -> dict[str, Any]:
    if signature is not None:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            pass
        else:
            bound.apply_defaults()  # the op's defaults are part of the call (eps=1e-6): the reference needs them
            return dict(bound.arguments)
    return {**{f"arg{i}": value for i, value in enumerate(args)}, **kwargs}


class CallLog:
    """The file the calls go to, one JSON line each; repeated kinds of call are written once."""

    def __init__(self, path: Path, max_calls: int = MAX_CALLS) -> None:
        self.path = path
        self.max_calls = max_calls
        self._seen: set[bytes] = set()
        self._lock = threading.Lock()
        self.errors = 0  # calls whose facts could not be read (the call itself is never disturbed)

    def add(self, facts: CallFacts) -> None:
        """Appends one call's facts, unless the same kind of call was already written or the log is full;
        thread-safe."""
        line = ENCODER.encode(facts)
        with self._lock:
            if line in self._seen or len(self._seen) >= self.max_calls:
                return
            self._seen.add(line)
            with open(self.path, "ab") as handle:
                handle.write(line + b"\n")


def recording(
    fn: Callable[..., Any], signature: inspect.Signature | None, log: CallLog
) -> Callable[..., Any]:
    """`fn`, returning what it returns, with each call's facts written to `log`."""

    @functools.wraps(fn)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        try:  # the inputs' facts before the call: an op that writes into its inputs must not change them
            arguments = args_facts(
                {k: v for k, v in _bound(signature, args, kwargs).items() if not _is_ctx(v)}
            )
        except Exception:  # reading the facts must never break the user's program
            log.errors += 1
            return fn(*args, **kwargs)
        try:
            result = fn(*args, **kwargs)
        except BaseException:
            log.add(CallFacts(arguments, raised=True))  # what it was called with still says what to fuzz
            raise
        try:
            log.add(CallFacts(arguments, outputs_facts(result)))
        except Exception:
            log.errors += 1
        return result

    recorded.__gpuemu_recorded__ = True  # type: ignore[attr-defined]
    return recorded


def _is_ctx(value: Any) -> bool:
    return type(value).__name__ in ("FunctionCtx", "BackwardCFunction")


def patch(module: ModuleType, attribute: str, log: CallLog) -> None:
    """Replace `module.<attribute>` (a dotted path: `Class.apply`) by its recording wrapper."""
    *path, name = attribute.split(".")
    owner: Any = module
    for part in path:
        owner = getattr(owner, part)
    fn = getattr(owner, name)
    if getattr(fn, "__gpuemu_recorded__", False):
        return
    wrapper = recording(fn, parameter_names(owner, name, fn), log)
    setattr(owner, name, staticmethod(wrapper) if isinstance(owner, type) else wrapper)


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, attribute: str, log: CallLog) -> None:
        self.inner, self.attribute, self.log = inner, attribute, log

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        patch(module, self.attribute, self.log)


class _PatchingFinder(importlib.abc.MetaPathFinder):
    """Finds the target's module with the other finders, then patches it once it has run."""

    def __init__(self, module: str, attribute: str, log: CallLog) -> None:
        self.module, self.attribute, self.log = module, attribute, log

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.module:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader, self.attribute, self.log)
                return spec
        return None


def install(target: str, path: Path) -> CallLog:
    """Record the calls of `target` in this process, to `path`, from now on."""
    module_name, attribute = split_target(target)
    path.write_bytes(b"")  # this run's calls only
    log = CallLog(path)
    if module_name in sys.modules:
        patch(sys.modules[module_name], attribute, log)
    else:
        sys.meta_path.insert(0, _PatchingFinder(module_name, attribute, log))
    return log


# The child process `gpuemu-ci add ... -- COMMAND` runs COMMAND in: the hook first, then the user's Python.
RECORD_TARGET = "GPUEMU_RECORD_TARGET"
RECORD_FILE = "GPUEMU_RECORD_FILE"


def run_recorded(argv: list[str]) -> None:
    """`python -m gpuemu_ci.onboard.record SCRIPT ARGS...` or `... -m MODULE ARGS...`, with the calls of
    $GPUEMU_RECORD_TARGET written to $GPUEMU_RECORD_FILE."""
    import runpy

    install(os.environ[RECORD_TARGET], Path(os.environ[RECORD_FILE]))
    if argv[:1] == ["-m"] and len(argv) > 1:
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        sys.path.insert(0, str(Path(argv[0]).resolve().parent))
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    run_recorded(sys.argv[1:])
