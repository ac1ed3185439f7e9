"""Whether the op under test changed the layer that checks it (issue #45, item 5).

The layer runs in the op's own process (it patches Triton's interpreter there), so an op could switch its
checks off from inside: rebind one of the layer's functions (`accesses.checked = ...`), clear its record of the
running call (`active.RUNNING.call = None`), or put the interpreter's own methods back. `watch()` records, once,
when the worker starts and before any user code is imported, every attribute of the modules that check a case
(`GUARDED`: the layer, and the op side that drives it) and of the classes they define, with each function's
code and defaults; `changed()` names what differs now, and `restore()` puts it back. The layer (layer.py)
asks after every op call, together with whether its own hooks on the interpreter are still in place and still
see the call, and fails the case as `tampered` if not: the checks the case was promised did not all run.

What this cannot see: an op that edits the worker's memory (ctypes), or that rewrites this module's own
record of the modules before it is asked. Those need code written against gpuemu-ci itself; they are out of
reach of any check made in the process the op runs in.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

# The layer's own modules; the worker adds those of the op side that drive it (backends/worker.py).
GUARDED = (
    "gpuemu_ci.triton_cpu.accesses",
    "gpuemu_ci.triton_cpu.active",
    "gpuemu_ci.triton_cpu.autotune",
    "gpuemu_ci.triton_cpu.boolops",
    "gpuemu_ci.triton_cpu.builder_hooks",
    "gpuemu_ci.triton_cpu.call",
    "gpuemu_ci.triton_cpu.grid",
    "gpuemu_ci.triton_cpu.guard",
    "gpuemu_ci.triton_cpu.imported",
    "gpuemu_ci.triton_cpu.internal",
    "gpuemu_ci.triton_cpu.language",
    "gpuemu_ci.triton_cpu.launch",
    "gpuemu_ci.triton_cpu.layer",
    "gpuemu_ci.triton_cpu.lowp",
    "gpuemu_ci.triton_cpu.lowp_builder",
    "gpuemu_ci.triton_cpu.memory",
    "gpuemu_ci.triton_cpu.numerics",
    "gpuemu_ci.triton_cpu.provenance",
    "gpuemu_ci.triton_cpu.replay",
    "gpuemu_ci.triton_cpu.report",
    "gpuemu_ci.triton_cpu.shadow",
    "gpuemu_ci.triton_cpu.shadow_ops",
    "gpuemu_ci.triton_cpu.sites",
    "gpuemu_ci.triton_cpu.tape",
    "gpuemu_ci.triton_cpu.touches",
    "gpuemu_ci.triton_cpu.tracer",
    "gpuemu_ci.triton_cpu.vectorised",
)
_ABSENT = object()


@dataclass(frozen=True)
class _Entry:
    """One recorded attribute: where it lives, its value, and for a function its code and defaults (which can be
    swapped without rebinding the function)."""

    names: Any  # the owner's namespace (a module's dict, a class's mapping proxy): a live view
    label: str
    name: str
    value: Any
    code: Any = None
    defaults: Any = None
    kwdefaults: Any = None

    def changed(self) -> bool:
        now = self.names.get(self.name, _ABSENT)
        if now is not self.value:
            return True
        if self.code is None:
            return False
        return bool(
            now.__code__ is not self.code
            or now.__defaults__ is not self.defaults
            or now.__kwdefaults__ is not self.kwdefaults
        )

    def restore(self, owner: object) -> None:
        if self.names.get(self.name, _ABSENT) is not self.value:
            try:
                setattr(owner, self.name, self.value)
            except (AttributeError, TypeError):
                return
        if self.code is not None:
            try:
                self.value.__code__ = self.code
                self.value.__defaults__, self.value.__kwdefaults__ = self.defaults, self.kwdefaults
            except (ValueError, TypeError):
                return


@dataclass
class _Record:
    """Every recorded attribute, with its owner."""

    entries: list[tuple[Any, _Entry]] = field(default_factory=list)

    def add(self, owner: object, label: str) -> None:
        names = owner.__dict__
        for name, value in list(names.items()):
            entry = _Entry(names, label, name, value)
            if isinstance(value, types.FunctionType):
                entry = _Entry(
                    names, label, name, value, value.__code__, value.__defaults__, value.__kwdefaults__
                )
            self.entries.append((owner, entry))


_record: dict[str, _Record | None] = {"now": None}


def watch(drivers: tuple[types.ModuleType, ...] = ()) -> None:
    """Record the guarded modules (imported here if they are not yet), `drivers` (the modules that call the
    layer), and their classes. Call once, before any user code runs; later calls keep the first record."""
    if _record["now"] is not None:
        return
    import importlib

    record = _Record()
    for module in [*(importlib.import_module(name) for name in GUARDED), *drivers]:
        name = module.__name__
        record.add(module, name)
        for value in list(vars(module).values()):
            if isinstance(value, type) and value.__module__ == name:
                record.add(value, f"{name}.{value.__qualname__}")
    _record["now"] = record


def watching() -> bool:
    """Whether the guarded modules have been recorded (`watch` ran in this process)."""
    return _record["now"] is not None


def changed() -> list[str]:
    """What differs from the record: `module.attribute` (or `module.Class.attribute`), at most a few."""
    record = _record["now"]
    if record is None:
        return []
    found = []
    for _, entry in record.entries:
        if entry.changed():
            found.append(f"{entry.label}.{entry.name}")
            if len(found) >= 5:
                break
    return found


def restore() -> None:
    """Put every recorded attribute back (the next case runs under the layer as it was shipped)."""
    record = _record["now"]
    if record is None:
        return
    for owner, entry in record.entries:
        entry.restore(owner)
