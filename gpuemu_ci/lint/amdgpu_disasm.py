"""Parser for `llvm-objdump -d --mcpu=<gfx>` on an AMDGPU code object: each function's instructions.

    0000000000001700 <gelu>:
        s_load_dword s0, s[4:5], 0x4                               // 000000001700: C0020002 00000004
        ...
        s_endpgm                                                   // 0000000018A0: BF810000
        s_nop 0                                                    // 0000000018A4: BF800000

llvm-objdump runs a function on to the next symbol, so the padding after the last one (`s_nop 0` or
`s_code_end` up to the cache line) would count as its code: with the symbol sizes from the ELF symbol table
(lint/amdgpu_code_object.py) each function is cut to its own bytes.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

_FUNCTION = re.compile(r"^(?P<address>[0-9a-fA-F]+) <(?P<name>[^>]+)>:\s*$")
_INSTRUCTION = re.compile(r"^\s+(?P<text>\S.*?)\s*//\s*(?P<address>[0-9a-fA-F]+):(?P<rest>.*)$")


@dataclass(frozen=True)
class IsaInstruction:
    """One instruction of an AMDGPU disassembly: its address and text as llvm-objdump prints it."""

    address: int
    text: str  # "v_fma_f32 v5, v4, s0, -v1"

    @property
    def opcode(self) -> str:
        """The mnemonic (`v_fma_f32`), the first word of the text."""
        return self.text.split(None, 1)[0]


@dataclass(frozen=True)
class IsaFunction:
    """One function of an AMDGPU disassembly: its (mangled) symbol, address and instructions."""

    name: str  # the symbol (mangled)
    address: int
    instructions: tuple[IsaInstruction, ...]

    def opcode_counts(self) -> dict[str, int]:
        """How many times each mnemonic occurs, sorted by mnemonic."""
        return dict(sorted(Counter(i.opcode for i in self.instructions).items()))


def parse_objdump(text: str, sizes: Mapping[str, tuple[int, int]] | None = None) -> tuple[IsaFunction, ...]:
    """Every function of the disassembly, cut to its symbol's size when `sizes` (symbol -> (address, size))
    knows it. Raises ValueError when the text holds no function (not llvm-objdump's disassembly)."""
    functions: list[tuple[str, int, list[IsaInstruction]]] = []
    for line in text.splitlines():
        header = _FUNCTION.match(line)
        if header is not None:
            functions.append((header.group("name"), int(header.group("address"), 16), []))
            continue
        m = _INSTRUCTION.match(line)
        if m is not None and functions:
            functions[-1][2].append(IsaInstruction(int(m.group("address"), 16), m.group("text")))
    if not functions:
        raise ValueError("llvm-objdump printed no function (no `<name>:` header)")
    out = []
    for name, address, instructions in functions:
        bounds = (sizes or {}).get(name)
        if bounds is not None:
            start, size = bounds
            instructions = [i for i in instructions if start <= i.address < start + size]
        out.append(IsaFunction(name, address, tuple(instructions)))
    return tuple(out)
