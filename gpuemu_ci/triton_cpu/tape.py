"""A traced launch as data (issue #29): a `Tape` of builder steps and guards, made smaller without changing what
it computes. tracer.py records one, replay.py runs it again; see replay.py for the whole design.

A step is (kind, what, operands, keyword operands, result slots): kind `CALL` (a builder method, by name),
`GUARD` (a Python decision the kernel made on a value, with its outcome) or `LANG` (a language-level function
the grid runs over the program axis: reductions, scans, `.T`). An operand is a `Ref` (the slot of an earlier
result or a lifted argument), a `TensorRef` (a `tl.tensor` of such a slot), a `Nested` list or tuple holding
references, or a constant.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Builder methods whose accesses the layer may describe by source line (poisoned lanes): their line is recorded.
SITED = ("load", "store", "atomic")

STORES = ("store", "atomic")  # a step that writes memory: the replay saves memory before the first
CALL, GUARD, LANG = 0, 1, 2
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


def agrees(tape: Tape, hint: tuple[int, str, Any] | None) -> bool:
    """Whether the tape's step `hint[0]` is a guard of kind `hint[1]` with the outcome `hint[2]`: the tape of
    a group of programs split at that guard (tried first for the group; the guards decide, not this)."""
    if hint is None or hint[0] >= len(tape.steps):
        return False
    step = tape.steps[hint[0]]
    return bool(step[0] == GUARD and step[1] == hint[1] and step[3] == hint[2])


class Ref(int):
    """An operand: the tape slot of an earlier result or a lifted argument."""


@dataclass(frozen=True)
class TensorRef:
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


_pure: dict[str, bool] = {}


def is_pure(name: str) -> bool:
    """Whether a builder method's result depends on its operands alone (it may be folded or shared)."""
    found = _pure.get(name)
    if found is None:
        found = _pure[name] = not any(word in name for word in _IMPURE)
    return found


@dataclass(frozen=True)
class Nested:
    """A list or tuple operand holding references."""

    kind: type
    items: tuple[Any, ...]


def outcomes(tape: Tape) -> tuple[Any, ...]:
    """The outcomes of the tape's guards, in order: two tapes with the same outcomes are the same path."""
    return tuple(step[3] for step in tape.steps if step[0] == GUARD)


def is_constant(spec: Any, constants: dict[int, Any]) -> bool:
    """Whether an operand refers only to results folded into constants (or is a constant itself)."""
    if type(spec) is Ref:
        return int(spec) in constants
    if isinstance(spec, TensorRef):
        return spec.slot in constants
    if isinstance(spec, Nested):
        return all(is_constant(s, constants) for s in spec.items)
    return True


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


def simplified(
    steps: list[tuple[Any, ...]], constants: dict[int, Any], sites: dict[int, str]
) -> tuple[list[tuple[Any, ...]], dict[int, str]]:
    """The steps with equal constants made one, a pure step that repeats an earlier one (the same method on
    the same operands: a loop body recomputing its invariants) replaced by the earlier result, and the
    results of `_SILENT` steps that nothing uses dropped. Each remaining step computes what it computed in
    the traced pass, from the same values."""
    alias: dict[int, int] = {}
    by_value: dict[Hashable, int] = {}
    for slot, value in constants.items():
        key = _constant_key(value)
        if key is not None:
            alias[slot] = by_value.setdefault(key, slot)
    kept: list[tuple[int, tuple[Any, ...]]] = []
    seen: dict[Hashable, int] = {}
    for index, step in enumerate(steps):
        kind, what, spec, kw, out = step
        if kind == GUARD:
            spec = alias.get(spec, spec) if type(spec) is int else tuple(_aliased(b, alias) for b in spec)
            kept.append((index, (kind, what, spec, kw, out)))
            continue
        spec = tuple(_aliased(v, alias) for v in spec)
        kw = {k: _aliased(v, alias) for k, v in kw.items()} if kw else kw
        if kind == CALL and isinstance(out, int) and is_pure(what):
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
        if kind == CALL and what in _SILENT and (out is None or (isinstance(out, int) and out not in used)):
            continue
        if kind == GUARD:
            used.update([spec] if type(spec) is int else (int(b) for b in spec if type(b) is Ref))
        else:
            for operand in (*spec, *(kw or {}).values()):
                used.update(_slots(operand))
        live.append((index, step))
    live.reverse()
    return [step for _, step in live], {i: sites[old] for i, (old, _) in enumerate(live) if old in sites}


def _aliased(spec: Any, alias: dict[int, int]) -> Any:
    if type(spec) is Ref:
        return Ref(alias.get(spec, spec))
    if isinstance(spec, TensorRef):
        return TensorRef(alias.get(spec.slot, spec.slot), spec.type)
    if isinstance(spec, Nested):
        return Nested(spec.kind, tuple(_aliased(s, alias) for s in spec.items))
    return spec


def _slots(spec: Any) -> list[int]:
    if type(spec) is Ref:
        return [int(spec)]
    if isinstance(spec, TensorRef):
        return [spec.slot]
    if isinstance(spec, Nested):
        return [slot for s in spec.items for slot in _slots(s)]
    return []


def _operand_key(spec: Any) -> Any:
    """A hashable key that tells operands apart as the method would (a slot from the constant 3, 1 from 1.0)."""
    if type(spec) is Ref:
        return ("slot", int(spec))
    if isinstance(spec, TensorRef):
        return ("tensor", spec.slot, spec.type)
    if isinstance(spec, Nested):
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


def compiled(step: tuple[Any, ...]) -> tuple[Any, ...]:
    """A recorded call as the replay runs it: (kind, what, constant operands with the references' places to
    fill, [(place, slot)], whether an operand needs more than a slot, keyword operands, result slots)."""
    kind, what, spec, kw, out = step
    if kind == GUARD:
        return (kind, what, spec, kw, (), False, None)
    template = [None if isinstance(v, (Ref, TensorRef, Nested)) else v for v in spec]
    refs = tuple((i, int(v)) for i, v in enumerate(spec) if type(v) is Ref)
    slow = any(isinstance(v, (TensorRef, Nested)) for v in spec)
    return (kind, what, spec if slow else template, kw, refs, slow, out)


def tape_key(signature: Hashable, args: dict[str, Any]) -> Any:
    """What a tape is valid for: the kernel, its constexprs and argument types (`signature`), and the values of
    the arguments the interpreter passes as Python values (floats, None), which the tape holds as constants."""
    plain = tuple(repr(v) for v in args.values() if not hasattr(v, "handle"))
    return (signature, plain)
