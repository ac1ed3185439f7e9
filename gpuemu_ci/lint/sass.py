"""SASS readers: `cuobjdump -sass` / `nvdisasm -c` text and `nvdisasm --emit-json`, to per-function opcodes.

Instruction lines are `/*addr*/ [@pred] OPCODE.MODS operands ;`; cuobjdump's encoding-only lines
(`/* 0x000fe4... */`) have a space and `0x` and never match. `body` leaves out the alignment padding at the
end of a function (trailing NOPs and the self-branch before them), which moves with 128-byte alignment,
not with the code.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

_FUNC_CUOBJ = re.compile(r"^\s*Function : (?P<name>\S+)\s*$")
_FUNC_NVDIS = re.compile(r"^\s*\.section\s+\.text\.(?P<name>[^,\s]+),")
_INSN = re.compile(
    r"^\s*/\*(?P<addr>[0-9a-f]{4,})\*/\s+(?:(?P<pred>@!?U?P(?:[0-7]|T))\s+)?"
    r"(?P<op>[A-Z][A-Z0-9_]*)(?P<mods>(?:\.[A-Za-z0-9_]+)*)(?P<operands>[^;]*);"
)
_LABEL = re.compile(r"^\s*(?P<label>\.L_x_\d+):\s*$")
_BRA_TARGET = re.compile(r"^\s*(?:0x(?P<addr>[0-9a-f]+)|`\((?P<label>\.L_x_\d+)\))\s*$")
_INSTRUCTION_BYTES = 16  # every arch CUDA 12+ targets (sm_70 and later) has 128-bit instructions


@dataclass(frozen=True)
class SassInstruction:
    """One SASS instruction as the disassembler prints it: full opcode, operands, guard predicate, address,
    and whether it is the end-of-function trap (a branch to itself)."""

    opcode: str  # full, e.g. "ISETP.GE.AND"
    operands: str
    predicate: str | None = None
    address: int | None = None
    self_branch: bool = False  # a BRA to its own address: the end-of-function trap before padding

    @property
    def base(self) -> str:
        """The opcode without its modifiers (`ISETP` for `ISETP.GE.AND`)."""
        return self.opcode.split(".")[0]

    @property
    def text(self) -> str:
        """What patterns are matched against: `OPCODE operands`, predicate left off."""
        return f"{self.opcode} {self.operands}".strip()


@dataclass(frozen=True)
class SassFunction:
    """One function of a SASS disassembly: its (mangled) name and instructions."""

    name: str  # mangled
    instructions: tuple[SassInstruction, ...]

    @property
    def total(self) -> int:
        """The number of instructions."""
        return len(self.instructions)

    @property
    def body(self) -> tuple[SassInstruction, ...]:
        """Instructions without the trailing alignment padding (NOPs and the final self-branch)."""
        end = len(self.instructions)
        while end and self.instructions[end - 1].opcode == "NOP" and not self.instructions[end - 1].predicate:
            end -= 1
        if end and self.instructions[end - 1].self_branch:
            end -= 1
        return self.instructions[:end]

    def opcode_counts(self) -> dict[str, int]:
        """Full opcode -> count over the body (padding left out, so counts follow the code, not alignment)."""
        return dict(Counter(i.opcode for i in self.body))


def parse_sass_text(text: str) -> tuple[SassFunction, ...]:
    """Parse `cuobjdump -sass` or `nvdisasm -c` output (both give the same counts)."""
    functions: list[SassFunction] = []
    name: str | None = None
    current: list[SassInstruction] = []
    label_at: dict[str, int] = {}
    pending_label: str | None = None

    def close() -> None:
        if name is not None:
            functions.append(SassFunction(name, tuple(current)))

    for line in text.splitlines():
        head = _FUNC_CUOBJ.match(line) or _FUNC_NVDIS.match(line)
        if head is not None:
            close()
            name, current, label_at, pending_label = head.group("name"), [], {}, None
            continue
        if name is None:
            continue
        lab = _LABEL.match(line)
        if lab is not None:
            pending_label = lab.group("label")
            continue
        m = _INSN.match(line)
        if m is None:
            continue
        address = int(m.group("addr"), 16)
        if pending_label is not None:
            label_at[pending_label] = address
            pending_label = None
        opcode = m.group("op") + m.group("mods")
        operands = " ".join(m.group("operands").split())
        self_branch = False
        if opcode == "BRA" and not m.group("pred"):
            t = _BRA_TARGET.match(operands)
            if t is not None:
                target = int(t.group("addr"), 16) if t.group("addr") else label_at.get(t.group("label"))
                self_branch = target == address
        current.append(SassInstruction(opcode, operands, m.group("pred"), address, self_branch))
    close()
    return tuple(functions)


def _json_function(entry: dict[str, Any]) -> SassFunction:
    start = int(entry.get("start", 0))
    out: list[SassInstruction] = []
    for index, ins in enumerate(entry.get("sass-instructions", [])):
        opcode = str(ins.get("opcode", ""))
        operands = str(ins.get("operands", ""))
        predicate = ins.get("predicate")
        address = start + index * _INSTRUCTION_BYTES
        self_branch = False
        if opcode == "BRA" and not predicate:
            t = _BRA_TARGET.match(operands)
            self_branch = (
                t is not None and t.group("addr") is not None and int(t.group("addr"), 16) == address
            )
        out.append(SassInstruction(opcode, operands, predicate, address, self_branch))
    return SassFunction(str(entry.get("function-name", "")), tuple(out))


def parse_nvdisasm_json(text: str) -> tuple[SassFunction, ...]:
    """Parse `nvdisasm --emit-json`: `[header, [function, ...]]`. Raises ValueError on malformed JSON."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"nvdisasm JSON is not valid JSON: {exc}") from exc
    if not isinstance(doc, list) or len(doc) < 2 or not isinstance(doc[1], list):
        raise ValueError("nvdisasm JSON does not have the [header, [functions]] shape")
    return tuple(_json_function(f) for f in doc[1] if isinstance(f, dict))
