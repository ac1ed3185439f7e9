"""Records a vectorised pass (grid.py) as a `Tape` (tape.py) that later launches of the kernel replay (replay.py).

The tracer wraps every builder method (`builder_methods`) and the grid's language patches (`language`) for the
pass, records the outermost calls the kernel makes with their operands and results, and every Python decision
the kernel makes on a value as a guard (`bool`, `index`, `range`). What it cannot see safely stops it
(`broken` says why): the kernel then runs as before, untraced.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from gpuemu_ci.triton_cpu import active
from gpuemu_ci.triton_cpu.boundary import Patch
from gpuemu_ci.triton_cpu.grid import block_elements
from gpuemu_ci.triton_cpu.tape import (
    CALL,
    GUARD,
    LANG,
    SITED,
    STORES,
    TAPES_PER_KEY,
    Nested,
    Ref,
    Tape,
    TensorRef,
    compiled,
    is_constant,
    is_pure,
    outcomes,
    simplified,
)

MODULE = "triton.runtime.interpreter"


class Tracer:
    """Records one vectorised pass as a tape (see the module's docstring); `broken` says why it could not."""

    def __init__(self, site: Callable[[], str]) -> None:
        self.site = site
        self.depth = 0  # > 0 inside a recorded call: what it does itself is not recorded
        self.broken = ""
        self.steps: list[tuple[Any, ...]] = []
        self.sites: dict[int, str] = {}
        self.slot_of: dict[int, int] = {}
        self.keep: list[Any] = []  # every recorded handle, alive until the pass ends (ids are its keys)
        self.inputs: list[tuple[str, int]] = []
        self.injected: list[dict[str, Any]] = []  # module namespaces given `traced_range` for the pass
        self.harvested: list[Tape] = []  # one tape per run of the kernel that completed (a group, a chunk)
        self._arguments: list[tuple[str, Any]] = []

    # ---- recording ---------------------------------------------------------------------------------------

    def stop(self, why: str) -> None:
        """Stop recording: the pass cannot be traced (the first reason is kept)."""
        if not self.broken:
            self.broken = why

    def _new_slot(self, handle: Any) -> int:
        slot = len(self.keep)
        self.keep.append(handle)
        self.slot_of[id(handle)] = slot
        return slot

    def add_input(self, name: str, handle: Any) -> None:
        """A lifted argument of the kernel: a slot that each replay fills with the launch's own."""
        self._arguments.append((name, handle))
        self.inputs.append((name, self._new_slot(handle)))

    def reset(self) -> None:
        """Start a new tape: the kernel runs again (on another group of programs, or another chunk)."""
        self.steps, self.sites, self.slot_of, self.keep, self.inputs = [], {}, {}, [], []
        for name, handle in self._arguments:
            self.inputs.append((name, self._new_slot(handle)))

    def harvest(self) -> None:
        """The kernel's run completed: keep its tape (unless one with the same guard outcomes is kept), and
        stop tracing once there are enough."""
        tape = self.tape()
        if tape is not None and all(outcomes(t) != outcomes(tape) for t in self.harvested):
            self.harvested.append(tape)
        self.reset()
        if self.broken or len(self.harvested) >= TAPES_PER_KEY:
            self.depth = 1  # the other runs are not traced

    def _operand(self, value: Any, handle_type: type) -> Any:
        if isinstance(value, handle_type):
            slot = self.slot_of.get(id(value))
            if slot is None:
                raise _Untraceable("an operand the tape did not make")
            return Ref(slot)
        if value is None or isinstance(value, (bool, int, float, str, np.generic)):
            return value
        if isinstance(value, (tuple, list)):
            items = [self._operand(v, handle_type) for v in value]
            if any(isinstance(i, (Ref, TensorRef, Nested)) for i in items):
                return Nested(type(value), tuple(items))
            return type(value)(items)
        import triton.language as tl

        if isinstance(value, (tl.dtype, tl.constexpr)) or _is_enum(value) or _is_semantic(value):
            return value  # types, enums and the interpreter's semantic (`_semantic=`) are constants
        if isinstance(value, tl.tuple):  # a shape
            items = [self._operand(v, handle_type) for v in value]
            if any(isinstance(i, (Ref, TensorRef, Nested)) for i in items):
                raise _Untraceable("a Triton tuple of values")
            return value
        if isinstance(value, tl.tensor):
            handle = value.handle
            slot = self.slot_of.get(id(handle))
            if slot is None:
                raise _Untraceable("an operand the tape did not make")
            return TensorRef(slot, value.type)
        if callable(value):
            return value  # a combine function: a constant of the kernel
        raise _Untraceable(f"an operand of type {type(value).__module__}.{type(value).__name__}")

    def _result(self, made: Any, handle_type: type) -> Any:
        import triton.language as tl

        if isinstance(made, handle_type):
            return self._new_slot(made)
        if isinstance(made, tl.tensor):
            return self._new_slot(made.handle)
        if isinstance(made, tuple) and all(isinstance(m, (handle_type, tl.tensor)) for m in made):
            return tuple(self._result(m, handle_type) for m in made)
        if made is None or isinstance(made, tl.dtype):
            return None
        raise _Untraceable(f"a result of type {type(made).__name__}")

    def record(self, kind: int, what: Any, args: tuple[Any, ...], kwargs: dict[str, Any], made: Any) -> None:
        """One outermost step with its operands (as the kernel passed them) and its result."""
        if self.broken:
            return
        handle_type = sys.modules[MODULE].TensorHandle
        try:
            spec = tuple(self._operand(a, handle_type) for a in args)
            kw = {k: self._operand(v, handle_type) for k, v in kwargs.items()} or None
            out = self._result(made, handle_type)
        except _Untraceable as exc:
            self.stop(f"{exc} (in `{getattr(what, '__name__', what)}`)")
            return
        self.steps.append((kind, what, spec, kw, out))

    def guard(self, tensor: Any, kind: str, outcome: Any) -> None:
        """A Python decision the kernel made on a value (`kind`: "bool" or "index"), kept with its outcome."""
        if self.broken:
            return
        slot = self.slot_of.get(id(tensor.handle))
        if slot is None:
            self.stop("a branch on a value the tape did not make")
            return
        self.steps.append((GUARD, kind, slot, outcome, None))

    def tape(self) -> Tape | None:
        """The recorded steps as a tape, folded and made smaller; None when the pass could not be traced."""
        if self.broken:
            return None
        steps, constants, sites = self._folded()
        steps, sites = simplified(steps, constants, sites)
        first_store = next(
            (i for i, step in enumerate(steps) if step[0] == CALL and any(s in step[1] for s in STORES)),
            len(steps),
        )
        return Tape([compiled(step) for step in steps], list(self.inputs), len(self.keep), first_store, sites,
                    constants)  # fmt: skip

    def _folded(self) -> tuple[list[tuple[Any, ...]], dict[int, Any], dict[int, str]]:
        """The steps without those computed from constants alone (their results become constants of the tape)
        and without guards on such constants (they hold at every launch)."""
        constants: dict[int, Any] = {}
        steps: list[tuple[Any, ...]] = []
        sites: dict[int, str] = {}
        for index, step in enumerate(self.steps):
            kind, what, spec, kw, out = step
            if kind == GUARD:
                held = (
                    spec in constants
                    if isinstance(spec, int)
                    else all(is_constant(b, constants) for b in spec)
                )
                if not held:
                    steps.append(step)
                continue
            operands = [*spec, *(kw or {}).values()]
            pure = kind == CALL and is_pure(what)
            if pure and isinstance(out, int) and all(is_constant(v, constants) for v in operands):
                constants[out] = self.keep[out]
                continue
            if index in self.sites:
                sites[len(steps)] = self.sites[index]
            steps.append(step)
        return steps, constants, sites

    # ---- what the pass runs while it is traced ------------------------------------------------------------

    def builder_methods(self, builder: Any) -> list[Patch]:
        """(owner, name, value): every builder method, as installed for the pass, wrapped to be recorded (by
        the tracer of the running launch (active.py))."""
        names = _method_names.get(id(builder))
        if names is None:
            names = _method_names[id(builder)] = [
                name
                for name in dir(builder)
                if name.startswith("create_") or (name.startswith("get_") and not name.endswith("_ty"))
            ]  # a `get_*_ty` makes a type from types: nothing to replay (the tape holds the types it needs)
        wrapped: list[Patch] = []
        for name in names:
            inner = getattr(builder, name)
            if callable(inner):
                wrapped.append((builder, name, _recording(name, inner)))
        return wrapped

    def language(self, patches: list[Patch]) -> list[Patch]:
        """The grid's language patches (reductions, scans, `bool`, `index`, `.T`) with recording around them."""
        traced: list[Patch] = []
        for owner, name, value in patches:
            if isinstance(value, property) and name == "T" and value.fget is not None:
                value = property(self._recorded_function(value.fget))
            elif not callable(value):
                pass
            elif name in ("reduce", "associative_scan"):
                value = self._recorded_function(value)
            elif name == "__bool__":
                value = self._guarded(value, "bool")
            elif name == "__index__":
                value = self._guarded(value, "index")
            traced.append((owner, name, value))
        import triton.language as tl

        for lang in (tl, tl.core):
            for name in ("range", "static_range"):
                if hasattr(lang, name):
                    traced.append((lang, name, self.language_range()))
        return traced

    def _recorded_function(self, inner: Callable[..., Any]) -> Callable[..., Any]:
        def function(*args: Any, **kwargs: Any) -> Any:
            if self.depth:
                return inner(*args, **kwargs)
            self.depth += 1
            try:
                made = inner(*args, **kwargs)
            finally:
                self.depth -= 1
            self.record(LANG, inner, args, kwargs, made)
            return made

        return function

    def _guarded(self, inner: Callable[..., Any], kind: str) -> Callable[..., Any]:
        def guarded(tensor: Any) -> Any:
            if self.depth:
                return inner(tensor)
            self.depth += 1
            try:
                outcome = inner(tensor)
            finally:
                self.depth -= 1
            if not (kind == "bool" and _always_true(tensor)):
                self.guard(tensor, kind, outcome)
            return outcome

        return guarded

    def traced_range(self, *bounds: Any) -> range:
        """Python's `range`, which a kernel calls on values (`range(0, n, BLOCK)`): its guard is the loop the
        kernel sees, (start, step, trip count), not the bounds, so that launches whose bounds differ but
        whose loops do not (n = 90 and 96 at a step of 32) share the tape."""
        import triton.language as tl

        if self.depth or not any(isinstance(b, tl.tensor) for b in bounds):
            return range(*bounds)
        self.depth += 1
        try:
            made = range(*(operator.index(b) for b in bounds))
        finally:
            self.depth -= 1
        if not self.broken:
            start, end, step = (0, bounds[0], 1) if len(bounds) == 1 else (*bounds, 1)[:3]
            spec: list[Any] = []
            for bound in (start, end, step):
                if isinstance(bound, tl.tensor):
                    slot = self.slot_of.get(id(bound.handle))
                    if slot is None:
                        self.stop("a loop bound the tape did not make")
                        return made
                    spec.append(Ref(slot))
                else:
                    spec.append(operator.index(bound))
            self.steps.append((GUARD, "range", tuple(spec), (made.start, made.step, len(made)), None))
        return made

    def language_range(self) -> Callable[..., range]:
        """`tl.range` / `tl.static_range` as the interpreter runs them, through `traced_range`."""

        def ranged(arg1: Any, arg2: Any = None, step: Any = None, **kwargs: Any) -> range:
            start, end = (0, arg1) if arg2 is None else (arg1, arg2)
            return self.traced_range(start, end, 1 if step is None else step)

        return ranged

    def patched(self, fn: Any) -> None:
        """A kernel or jit helper is about to run: its module's `range` is `traced_range` for the pass."""
        namespace = getattr(fn, "__globals__", None)
        if isinstance(namespace, dict) and "range" not in namespace:
            namespace["range"] = self.traced_range
            self.injected.append(namespace)

    def unpatch(self) -> None:
        """Take `traced_range` back out of the namespaces `patched` put it in."""
        for namespace in self.injected:
            if namespace.get("range") == self.traced_range:
                del namespace["range"]
        self.injected.clear()

    def watch_handles(self, module: ModuleType) -> list[Patch]:
        """A view of every value's data that stops the trace when read or written outside a recorded step."""
        tracer = self

        class WatchedData:
            def __get__(self, handle: Any, owner: object = None) -> Any:
                if handle is None:
                    return self
                if tracer.depth == 0:
                    tracer.stop("a read of a value's data outside a builder call")
                return handle.__dict__["data"]

            def __set__(self, handle: Any, value: Any) -> None:
                if tracer.depth == 0:
                    tracer.stop("a write of a value's data outside a builder call")
                handle.__dict__["data"] = value

        def truth(handle: Any) -> bool:
            tracer.stop("a Python truth test of a value's handle")
            return bool(handle.__dict__["data"].all())

        return [(module.TensorHandle, "data", WatchedData()), (module.TensorHandle, "__bool__", truth)]


class _Untraceable(Exception):
    pass


_method_names: dict[int, list[str]] = {}  # a builder class's methods that a tape records
# name -> (the method as installed, its recording): one per name (the layer's wrappers are made anew per call)
_wrappers: dict[str, tuple[Any, Callable[..., Any]]] = {}


def _recording(name: str, inner: Callable[..., Any]) -> Callable[..., Any]:
    """A builder method that the running tracer records when the kernel calls it (not when another recorded
    method does); made once per method as installed."""
    found = _wrappers.get(name)
    if found is not None and found[0] is inner:
        return found[1]
    sited = any(word in name for word in SITED)

    def method(builder: Any, *args: Any, **kwargs: Any) -> Any:
        tracer = active.tracer()
        if tracer is None or tracer.depth:
            return inner(builder, *args, **kwargs)
        tracer.depth += 1
        try:
            if sited and not tracer.broken:
                tracer.sites[len(tracer.steps)] = tracer.site()
            made = inner(builder, *args, **kwargs)
        finally:
            tracer.depth -= 1
        tracer.record(CALL, name, args, kwargs, made)
        return made

    _wrappers[name] = (inner, method)
    return method


def _is_semantic(value: Any) -> bool:
    return type(value).__module__.startswith("triton") and type(value).__name__.endswith("Semantic")


def _is_enum(value: Any) -> bool:
    return type(value).__module__.startswith("triton") and hasattr(value, "name") and hasattr(value, "value")


def _always_true(tensor: Any) -> bool:
    """The interpreter's `bool` of a block of more than one element: true whatever its data (no guard)."""
    return bool(tensor.type.is_block() and block_elements(tensor.type) != 1)
