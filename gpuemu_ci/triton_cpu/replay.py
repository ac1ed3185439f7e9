"""Trace a vectorised launch once, replay it as NumPy (issue #29): a launch cheaper than one interpreted program.

A vectorised pass (grid.py) runs the kernel's Python once: the kernel body, Triton's `triton.language` semantic
layer (type checks, broadcasting, the integer-overflow checks) and the interpreter's builder, whose methods do
the NumPy work. All but the last are the same at every launch of a kernel with the same constexprs and argument
types, and cost most of a small launch. During a vectorised pass the `Tracer` records the *tape* of the
outermost builder calls the kernel made (after the layer's own wrappers, so the bounds, race and poison checks
and the TF32 rounding run again at replay on the launch's own data), each operand a reference to an earlier
result or to a lifted argument, or a Python constant; and the reductions, scans and transposes the grid runs
over the program axis.

Every Python decision the kernel body made on a value is a *guard*, kept with its outcome, not the value: a
Python `if`/`while` on a tensor (the branch taken), a `range`/`tl.range` over values (the loop it made: start,
step and trip count), any other index (its value). Launches with other sizes share a tape when only masks see
them (a row kernel with `n_cols` in its mask: one tape for every `n_cols` up to its block). Steps computed from
constants alone (the kernel's constants splatted, their overflow checks) are folded into constants of the tape.
A later launch with the same key (the kernel, its constexprs, argument types and Python-valued arguments)
replays a tape on its own arguments, evaluating each guard where it came; a guard with another outcome (or a
value that differs between programs, or any exception) abandons the replay: memory is put back as it was
before the launch's first store, and the next tape kept for the key is tried (up to `TAPES_PER_KEY`, most
recently replayed first), then the vectorised pass, which records a new tape.

What the tracer cannot see safely makes the kernel untraceable (it runs as before): a read of a value's data
outside a builder call that is not one of the guards above, an operand the tape did not make, a builder result
that is not a value or a type, Python `and`/`or` on blocks (a note per site), a pass that diverged into groups.
Replays are not counted in the results: whether a launch replays depends on what the worker ran before, and a
replayed launch is counted as vectorised, which the pass it stands for would have been.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuemu_ci.triton_cpu.grid import block_elements

MODULE = "triton.runtime.interpreter"
# Builder methods whose accesses the layer may describe by source line (poisoned lanes): their line is recorded.
_SITED = ("load", "store", "atomic")
_STORES = ("store", "atomic")  # a step that writes memory: the replay saves memory before the first
_CALL, _GUARD, _LANG = 0, 1, 2
# Builder methods whose result depends on more than their operands (the launch's programs and grid, memory) or
# that act (stores, asserts, prints, dots: the call records their precision): never folded into constants.
_IMPURE = (
    "program_id",
    "num_programs",
    "load",
    "store",
    "atomic",
    "assert",
    "print",
    "histogram",
    "poll",
    "dot",
)
MAX_TAPES = 512  # kernels (by key) with tapes kept in a process
TAPES_PER_KEY = 4  # tapes kept per key (other loop trip counts, other branches), tried most recent first


class Abandon(Exception):
    """A guard of the tape has another outcome at this launch."""


class Diverged(Abandon):
    """A guard on a value that differs between the programs of the batch: `keys` holds each program's value
    (in the batch's order), to split the batch into groups as the vectorised pass does (grid.Divergent)."""

    def __init__(self, keys: np.ndarray) -> None:
        super().__init__("a branch on a value that differs between programs")
        self.keys = keys
        self.guard: tuple[int, str] | None = None  # (step, "bool" or "index") of the guard, where one


def agrees(tape: Tape, hint: tuple[int, str, Any] | None) -> bool:
    """Whether the tape's step `hint[0]` is a guard of kind `hint[1]` with the outcome `hint[2]`: the tape of
    a group of programs split at that guard (tried first for the group; the guards decide, not this)."""
    if hint is None or hint[0] >= len(tape.steps):
        return False
    step = tape.steps[hint[0]]
    return bool(step[0] == _GUARD and step[1] == hint[1] and step[3] == hint[2])


class _Ref(int):
    """An operand: the tape slot of an earlier result or a lifted argument."""


@dataclass(frozen=True)
class _TensorRef:
    """A `tl.tensor` operand of a language-level step: its handle's slot and its (static) type."""

    slot: int
    type: Any


@dataclass
class Tape:
    """One kernel's recorded launch: its steps, the slots of its arguments, and where its first store is."""

    steps: list[tuple[Any, ...]]
    inputs: list[tuple[str, int]]
    slots: int
    first_store: int  # index of the first step that writes memory (len(steps) when none does)
    sites: dict[int, str] = field(default_factory=dict)  # step index -> the kernel's source line
    # Results computed from constants alone (the kernel's constants splatted, their overflow checks...): made
    # once by the traced pass, uniform over the programs (a program axis of 1), never written in place.
    constants: dict[int, Any] = field(default_factory=dict)


_state: dict[str, Any] = {"tracer": None, "site": None}
tapes: dict[Any, list[Tape]] = {}
untraceable: dict[Any, str] = {}
fell_back: set[Any] = set()  # keys whose last traced pass fell back: their next pass runs untraced
# Launches of this process, for benchmarks (not in results: they depend on what the process ran before).
counts: dict[str, int] = {"replayed": 0, "abandoned": 0, "traced": 0}


def current_site() -> str | None:
    """The source line of the step being replayed (the layer names poisoned loads by it), else None."""
    site: str | None = _state["site"]
    return site


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
        if not self.broken:
            self.broken = why

    def _new_slot(self, handle: Any) -> int:
        slot = len(self.keep)
        self.keep.append(handle)
        self.slot_of[id(handle)] = slot
        return slot

    def add_input(self, name: str, handle: Any) -> None:
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
        if tape is not None and all(_outcomes(t) != _outcomes(tape) for t in self.harvested):
            self.harvested.append(tape)
        self.reset()
        if self.broken or len(self.harvested) >= TAPES_PER_KEY:
            self.depth = 1  # the other runs are not traced

    def _operand(self, value: Any, handle_type: type) -> Any:
        if isinstance(value, handle_type):
            slot = self.slot_of.get(id(value))
            if slot is None:
                raise _Untraceable("an operand the tape did not make")
            return _Ref(slot)
        if value is None or isinstance(value, (bool, int, float, str, np.generic)):
            return value
        if isinstance(value, (tuple, list)):
            items = [self._operand(v, handle_type) for v in value]
            if any(isinstance(i, (_Ref, _TensorRef, _Nested)) for i in items):
                return _Nested(type(value), tuple(items))
            return type(value)(items)
        import triton.language as tl

        if isinstance(value, (tl.dtype, tl.constexpr)) or _is_enum(value) or _is_semantic(value):
            return value  # types, enums and the interpreter's semantic (`_semantic=`) are constants
        if isinstance(value, tl.tuple):  # a shape
            items = [self._operand(v, handle_type) for v in value]
            if any(isinstance(i, (_Ref, _TensorRef, _Nested)) for i in items):
                raise _Untraceable("a Triton tuple of values")
            return value
        if isinstance(value, tl.tensor):
            handle = value.handle
            slot = self.slot_of.get(id(handle))
            if slot is None:
                raise _Untraceable("an operand the tape did not make")
            return _TensorRef(slot, value.type)
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
        if self.broken:
            return
        slot = self.slot_of.get(id(tensor.handle))
        if slot is None:
            self.stop("a branch on a value the tape did not make")
            return
        self.steps.append((_GUARD, kind, slot, outcome, None))

    def tape(self) -> Tape | None:
        if self.broken:
            return None
        steps, constants, sites = self._folded()
        steps, sites = _simplified(steps, constants, sites)
        first_store = next(
            (i for i, step in enumerate(steps) if step[0] == _CALL and any(s in step[1] for s in _STORES)),
            len(steps),
        )
        return Tape([_compiled(step) for step in steps], list(self.inputs), len(self.keep), first_store, sites,
                    constants)  # fmt: skip

    def _folded(self) -> tuple[list[tuple[Any, ...]], dict[int, Any], dict[int, str]]:
        """The steps without those computed from constants alone (their results become constants of the tape)
        and without guards on such constants (they hold at every launch)."""
        constants: dict[int, Any] = {}
        steps: list[tuple[Any, ...]] = []
        sites: dict[int, str] = {}
        for index, step in enumerate(self.steps):
            kind, what, spec, kw, out = step
            if kind == _GUARD:
                held = (
                    spec in constants if isinstance(spec, int) else all(_constant(b, constants) for b in spec)
                )
                if not held:
                    steps.append(step)
                continue
            operands = [*spec, *(kw or {}).values()]
            pure = kind == _CALL and _is_pure(what)
            if pure and isinstance(out, int) and all(_constant(v, constants) for v in operands):
                constants[out] = self.keep[out]
                continue
            if index in self.sites:
                sites[len(steps)] = self.sites[index]
            steps.append(step)
        return steps, constants, sites

    # ---- what the pass runs while it is traced ------------------------------------------------------------

    def builder_methods(self, builder: Any) -> list[tuple[Any, str, Any]]:
        """(owner, name, value): every builder method, as installed for the pass, wrapped to be recorded (by
        the tracer of `_state`, the one running)."""
        names = _method_names.get(id(builder))
        if names is None:
            names = _method_names[id(builder)] = [
                name
                for name in dir(builder)
                if name.startswith("create_") or (name.startswith("get_") and not name.endswith("_ty"))
            ]  # a `get_*_ty` makes a type from types: nothing to replay (the tape holds the types it needs)
        wrapped = []
        for name in names:
            inner = getattr(builder, name)
            if callable(inner):
                wrapped.append((builder, name, _recording(name, inner)))
        return wrapped

    def language(self, patches: list[tuple[Any, str, Any]]) -> list[tuple[Any, str, Any]]:
        """The grid's language patches (reductions, scans, `bool`, `index`, `.T`) with recording around them."""
        traced = []
        for owner, name, value in patches:
            if name in ("reduce", "associative_scan"):
                value = self._recorded_function(value)
            elif name == "__bool__":
                value = self._guarded(value, "bool")
            elif name == "__index__":
                value = self._guarded(value, "index")
            elif name == "T":
                value = property(self._recorded_function(value.fget))
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
            self.record(_LANG, inner, args, kwargs, made)
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
                    spec.append(_Ref(slot))
                else:
                    spec.append(operator.index(bound))
            self.steps.append((_GUARD, "range", tuple(spec), (made.start, made.step, len(made)), None))
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
        for namespace in self.injected:
            if namespace.get("range") == self.traced_range:
                del namespace["range"]
        self.injected.clear()

    def watch_handles(self, module: Any) -> list[tuple[Any, str, Any]]:
        """A view of every value's data that stops the trace when read or written outside a recorded step."""
        tracer = self

        class WatchedData:
            def __get__(self, handle: Any, owner: Any = None) -> Any:
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
    sited = any(word in name for word in _SITED)

    def method(builder: Any, *args: Any, **kwargs: Any) -> Any:
        tracer: Tracer | None = _state["tracer"]
        if tracer is None or tracer.depth:
            return inner(builder, *args, **kwargs)
        tracer.depth += 1
        try:
            if sited and not tracer.broken:
                tracer.sites[len(tracer.steps)] = tracer.site()
            made = inner(builder, *args, **kwargs)
        finally:
            tracer.depth -= 1
        tracer.record(_CALL, name, args, kwargs, made)
        return made

    _wrappers[name] = (inner, method)
    return method


_pure: dict[str, bool] = {}


def _is_pure(name: str) -> bool:
    found = _pure.get(name)
    if found is None:
        found = _pure[name] = not any(word in name for word in _IMPURE)
    return found


@dataclass(frozen=True)
class _Nested:
    """A list or tuple operand holding references."""

    kind: type
    items: tuple[Any, ...]


def _outcomes(tape: Tape) -> tuple[Any, ...]:
    return tuple(step[3] for step in tape.steps if step[0] == _GUARD)


def _constant(spec: Any, constants: dict[int, Any]) -> bool:
    if type(spec) is _Ref:
        return int(spec) in constants
    if isinstance(spec, _TensorRef):
        return spec.slot in constants
    if isinstance(spec, _Nested):
        return all(_constant(s, constants) for s in spec.items)
    return True


def _is_semantic(value: Any) -> bool:
    return type(value).__module__.startswith("triton") and type(value).__name__.endswith("Semantic")


def _is_enum(value: Any) -> bool:
    return type(value).__module__.startswith("triton") and hasattr(value, "name") and hasattr(value, "value")


def _always_true(tensor: Any) -> bool:
    """The interpreter's `bool` of a block of more than one element: true whatever its data (no guard)."""
    return bool(tensor.type.is_block() and block_elements(tensor.type) != 1)


# ---- the tape made smaller: the same values, fewer steps -------------------------------------------------

# Builder methods that cannot raise or warn whatever their operands' data (integer arithmetic on arrays wraps,
# comparisons and casts between integers do not warn): a result of one that nothing uses can be dropped, as
# no launch could tell. The interpreter's integer-overflow checks are such steps: without `debug`, their
# verdict goes to a `device_assert` that does nothing.
_SILENT = frozenset(
    ("create_icmpEQ", "create_icmpNE", "create_icmpSLT", "create_icmpSLE", "create_icmpSGT", "create_icmpSGE",
     "create_icmpULT", "create_icmpULE", "create_icmpUGT", "create_icmpUGE", "create_and", "create_or",
     "create_xor", "create_add", "create_sub", "create_mul", "create_int_cast", "create_splat",
     "create_broadcast", "create_expand_dims", "create_reshape", "create_trans", "create_make_range",
     "get_cache_policy")
)  # fmt: skip


def _simplified(
    steps: list[tuple[Any, ...]], constants: dict[int, Any], sites: dict[int, str]
) -> tuple[list[tuple[Any, ...]], dict[int, str]]:
    """The steps with equal constants made one, a pure step that repeats an earlier one (the same method on
    the same operands: a loop body recomputing its invariants) replaced by the earlier result, and the
    results of `_SILENT` steps that nothing uses dropped. Each remaining step computes what it computed in
    the traced pass, from the same values."""
    alias: dict[int, int] = {}
    by_value: dict[Any, int] = {}
    for slot, value in constants.items():
        key = _constant_key(value)
        if key is not None:
            alias[slot] = by_value.setdefault(key, slot)
    kept: list[tuple[int, tuple[Any, ...]]] = []
    seen: dict[Any, int] = {}
    for index, step in enumerate(steps):
        kind, what, spec, kw, out = step
        if kind == _GUARD:
            spec = alias.get(spec, spec) if type(spec) is int else tuple(_aliased(b, alias) for b in spec)
            kept.append((index, (kind, what, spec, kw, out)))
            continue
        spec = tuple(_aliased(v, alias) for v in spec)
        kw = {k: _aliased(v, alias) for k, v in kw.items()} if kw else kw
        if kind == _CALL and isinstance(out, int) and _is_pure(what):
            key = _step_key(what, spec, kw)
            if key is not None:
                earlier = seen.get(key)
                if earlier is not None:
                    alias[out] = earlier
                    continue
                seen[key] = out
        kept.append((index, (kind, what, spec, kw, out)))
    used: set[int] = set()
    live: list[tuple[int, tuple[Any, ...]]] = []
    for index, step in reversed(kept):
        kind, what, spec, kw, out = step
        if kind == _CALL and what in _SILENT and (out is None or (isinstance(out, int) and out not in used)):
            continue
        if kind == _GUARD:
            used.update([spec] if type(spec) is int else (int(b) for b in spec if type(b) is _Ref))
        else:
            for operand in (*spec, *(kw or {}).values()):
                used.update(_slots(operand))
        live.append((index, step))
    live.reverse()
    return [step for _, step in live], {i: sites[old] for i, (old, _) in enumerate(live) if old in sites}


def _aliased(spec: Any, alias: dict[int, int]) -> Any:
    if type(spec) is _Ref:
        return _Ref(alias.get(spec, spec))
    if isinstance(spec, _TensorRef):
        return _TensorRef(alias.get(spec.slot, spec.slot), spec.type)
    if isinstance(spec, _Nested):
        return _Nested(spec.kind, tuple(_aliased(s, alias) for s in spec.items))
    return spec


def _slots(spec: Any) -> list[int]:
    if type(spec) is _Ref:
        return [int(spec)]
    if isinstance(spec, _TensorRef):
        return [spec.slot]
    if isinstance(spec, _Nested):
        return [slot for s in spec.items for slot in _slots(s)]
    return []


def _operand_key(spec: Any) -> Any:
    """A hashable key that tells operands apart as the method would (a slot from the constant 3, 1 from 1.0)."""
    if type(spec) is _Ref:
        return ("slot", int(spec))
    if isinstance(spec, _TensorRef):
        return ("tensor", spec.slot, spec.type)
    if isinstance(spec, _Nested):
        return ("nested", spec.kind, tuple(_operand_key(s) for s in spec.items))
    if isinstance(spec, (list, tuple)):
        return (type(spec), tuple(_operand_key(s) for s in spec))
    import triton.language as tl

    if isinstance(spec, tl.dtype):  # a block type compares as a constexpr and has no hash: by its fields
        return (type(spec), tuple(sorted((k, _operand_key(v)) for k, v in vars(spec).items())))
    if isinstance(spec, tl.constexpr):
        return (type(spec), _operand_key(spec.value))
    if isinstance(spec, (float, np.generic)):  # by its bits: 0.0 == -0.0, and NaN payloads
        return (type(spec), np.asarray(spec).tobytes())
    return (type(spec), spec)


def _step_key(what: Any, spec: tuple[Any, ...], kw: dict[str, Any] | None) -> Any:
    try:
        key = (
            what,
            tuple(_operand_key(v) for v in spec),
            tuple(sorted((k, _operand_key(v)) for k, v in (kw or {}).items())),
        )
        hash(key)
    except TypeError:  # an unhashable operand: the step is kept as it is
        return None
    return key


def _constant_key(value: Any) -> Any:
    """What makes two folded constants (interpreter values) the same value, None for anything else. (Read
    past the tracer's watch on values' data: the tape is made while it is installed.)"""
    data = getattr(value, "__dict__", {}).get("data")
    if not isinstance(data, np.ndarray) or not isinstance(getattr(value, "attr", None), dict):
        return None
    try:
        key = (
            type(value),
            value.dtype,
            data.dtype.str,
            data.shape,
            data.tobytes(),
            tuple(sorted(value.attr.items())),
        )
        hash(key)
    except TypeError:
        return None
    return key


# ---- replay ----------------------------------------------------------------------------------------------


def _resolve(spec: Any, values: list[Any]) -> Any:
    if type(spec) is _Ref:
        return values[spec]
    if isinstance(spec, _TensorRef):
        import triton.language as tl

        return tl.tensor(values[spec.slot], spec.type)
    if isinstance(spec, _Nested):
        return spec.kind(_resolve(s, values) for s in spec.items)
    return spec


def _store(out: Any, made: Any, values: list[Any]) -> None:
    if out is None:
        return
    if isinstance(out, tuple):
        for slot, m in zip(out, made, strict=True):
            _store(slot, m, values)
        return
    values[out] = getattr(made, "handle", made)


def _compiled(step: tuple[Any, ...]) -> tuple[Any, ...]:
    """A recorded call as the replay runs it: (kind, what, constant operands with the references' places to
    fill, [(place, slot)], whether an operand needs more than a slot, keyword operands, result slots)."""
    kind, what, spec, kw, out = step
    if kind == _GUARD:
        return (kind, what, spec, kw, (), False, None)
    template = [None if isinstance(v, (_Ref, _TensorRef, _Nested)) else v for v in spec]
    refs = tuple((i, int(v)) for i, v in enumerate(spec) if type(v) is _Ref)
    slow = any(isinstance(v, (_TensorRef, _Nested)) for v in spec)
    return (kind, what, spec if slow else template, kw, refs, slow, out)


def _uniform(data: np.ndarray) -> Any:
    """The value of every program, as grid's `bool`/`index` read it; Diverged where programs differ."""
    if data.size > 1 and not np.all(data == data.flat[0]):
        from gpuemu_ci.triton_cpu import grid

        batch = grid.active()
        if batch is not None and data.shape[0] == batch.size and data.size == batch.size:
            raise Diverged(data.reshape(batch.size))
        raise Abandon("a branch on a value that differs between programs")
    return data.flat[0]


def replay_steps(
    tape: Tape, builder: Any, inputs: dict[str, Any], before_store: Callable[[bool], None]
) -> None:
    """Run the tape's steps on one chunk's lifted arguments (`inputs`: name -> handle), calling `before_store`
    before the first step that writes memory (with whether it is the tape's last step). Raises `Abandon` when a
    guard's outcome differs, `Diverged` when its value differs between the programs."""
    values: list[Any] = [None] * tape.slots
    for slot, value in tape.constants.items():
        values[slot] = value
    for name, slot in tape.inputs:
        values[slot] = inputs[name]
    methods: dict[str, Any] = {}
    sites = tape.sites
    try:
        for index, (kind, what, spec, kw, refs, slow, out) in enumerate(tape.steps):
            if kind == _GUARD:
                if what == "range":
                    loop = range(*(int(_uniform(values[b].data)) if type(b) is _Ref else b for b in spec))
                    seen: Any = (loop.start, loop.step, len(loop))
                else:
                    try:
                        value = _uniform(values[spec].data)
                    except Diverged as exc:
                        exc.guard = (index, what)
                        raise
                    seen = bool(value) if what == "bool" else int(value)
                if seen != kw:
                    raise Abandon(f"a guard's outcome differs ({what}: {kw} then, {seen} now)")
                continue
            if index == tape.first_store:
                before_store(index == len(tape.steps) - 1)
            if slow:
                args = [_resolve(v, values) for v in spec]
            else:
                args = list(spec)
                for place, slot in refs:
                    args[place] = values[slot]
            kwargs = {k: _resolve(v, values) for k, v in kw.items()} if kw else {}
            if kind == _CALL:
                method = methods.get(what)
                if method is None:
                    method = methods[what] = getattr(builder, what)
                _state["site"] = sites.get(index)
                made = method(*args, **kwargs)
            else:
                made = what(*args, **kwargs)
            _store(out, made, values)
    finally:
        _state["site"] = None
