"""Trace a vectorised launch once (tracer.py), replay it as NumPy (issue #29): cheaper than one interpreted
program.

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

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from gpuemu_ci.triton_cpu.tape import CALL, GUARD, Nested, Ref, Tape, TensorRef

if TYPE_CHECKING:
    from gpuemu_ci.triton_cpu.call import Launch


class Abandon(Exception):
    """A guard of the tape has another outcome at this launch."""


class Diverged(Abandon):
    """A guard on a value that differs between the programs of the batch: `keys` holds each program's value
    (in the batch's order), to split the batch into groups as the vectorised pass does (grid.Divergent)."""

    def __init__(self, keys: np.ndarray) -> None:
        super().__init__("a branch on a value that differs between programs")
        self.keys = keys
        self.guard: tuple[int, str] | None = None  # (step, "bool" or "index") of the guard, where one


def _resolve(spec: Any, values: list[Any]) -> Any:
    if type(spec) is Ref:
        return values[spec]
    if isinstance(spec, TensorRef):
        import triton.language as tl

        return tl.tensor(values[spec.slot], spec.type)
    if isinstance(spec, Nested):
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


def _uniform(data: np.ndarray, launch: Launch) -> Any:
    """The value of every program, as grid's `bool`/`index` read it; Diverged where programs differ."""
    if data.size > 1 and not np.all(data == data.flat[0]):
        batch = launch.batch
        if batch is not None and data.shape[0] == batch.size and data.size == batch.size:
            raise Diverged(data.reshape(batch.size))
        raise Abandon("a branch on a value that differs between programs")
    return data.flat[0]


def replay_steps(
    tape: Tape, builder: Any, inputs: dict[str, Any], before_store: Callable[[bool], None], launch: Launch
) -> None:
    """Run the tape's steps on one chunk's lifted arguments (`inputs`: name -> handle), calling `before_store`
    before the first step that writes memory (with whether it is the tape's last step). Raises `Abandon` when a
    guard's outcome differs, `Diverged` when its value differs between the programs. The launch's
    `replay_site` names the step being replayed meanwhile (sites.py)."""
    values: list[Any] = [None] * tape.slots
    for slot, value in tape.constants.items():
        values[slot] = value
    for name, slot in tape.inputs:
        values[slot] = inputs[name]
    methods: dict[str, Any] = {}
    sites = tape.sites
    try:
        for index, (kind, what, spec, kw, refs, slow, out) in enumerate(tape.steps):
            if kind == GUARD:
                if what == "range":
                    loop = range(
                        *(int(_uniform(values[b].data, launch)) if type(b) is Ref else b for b in spec)
                    )
                    seen: Any = (loop.start, loop.step, len(loop))
                else:
                    try:
                        value = _uniform(values[spec].data, launch)
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
            if kind == CALL:
                method = methods.get(what)
                if method is None:
                    method = methods[what] = getattr(builder, what)
                launch.replay_site = sites.get(index)
                made = method(*args, **kwargs)
            else:
                made = what(*args, **kwargs)
            _store(out, made, values)
    finally:
        launch.replay_site = None
