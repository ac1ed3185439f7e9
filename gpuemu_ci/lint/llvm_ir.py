"""Reader for the LLVM IR (`.ll` text) of a HIP source's device code, for `target = "llvm-ir"` patterns.

Only what patterns need: each `define`d function's body, one instruction per line (labels, comments and
blank lines left out), and the defined functions each one calls, so that a kernel's patterns see the code it
runs, including what was not inlined.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DEFINE = re.compile(r'^define\b[^@]*@(?P<name>"(?:[^"\\]|\\.)*"|[-\w$.]+)\s*\(')
_CALL = re.compile(r'\b(?:call|invoke)\b[^@]*@(?P<name>"(?:[^"\\]|\\.)*"|[-\w$.]+)\s*\(')
_LABEL = re.compile(r"^[-\w$.]+:(?:\s*;.*)?$")


def _unquote(name: str) -> str:
    return name[1:-1] if name.startswith('"') else name


@dataclass(frozen=True)
class IrFunction:
    """A function of an LLVM IR module: its name, its instructions' text and the functions it calls by
    name."""

    name: str
    instructions: tuple[str, ...]
    callees: tuple[str, ...]  # functions called by name, defined here or not


@dataclass(frozen=True)
class IrModule:
    """The functions of an LLVM IR module, as the HIP lint's patterns are matched against them."""

    functions: tuple[IrFunction, ...]

    def function(self, name: str) -> IrFunction | None:
        """The function `name`, or None when the module defines none."""
        return next((f for f in self.functions if f.name == name), None)

    def reachable(self, name: str) -> tuple[IrFunction, ...]:
        """The function and every function defined in the module that it calls, directly or not."""
        seen: dict[str, IrFunction] = {}
        pending = [name]
        while pending:
            f = self.function(pending.pop())
            if f is None or f.name in seen:
                continue
            seen[f.name] = f
            pending.extend(reversed(f.callees))
        return tuple(seen.values())


def parse_ir(text: str) -> IrModule:
    """The defined functions of an IR module. Raises ValueError when there is none."""
    functions: list[IrFunction] = []
    current: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        if current is None:
            m = _DEFINE.match(line)
            if m is not None:
                current, body = _unquote(m.group("name")), []
            continue
        if line.startswith("}"):
            callees = [_unquote(c.group("name")) for ins in body for c in _CALL.finditer(ins)]
            functions.append(IrFunction(current, tuple(body), tuple(dict.fromkeys(callees))))
            current = None
            continue
        stripped = line.strip()
        if stripped and not stripped.startswith(";") and not _LABEL.match(stripped):
            body.append(stripped)
    if not functions:
        raise ValueError("the LLVM IR defines no function")
    return IrModule(tuple(functions))
