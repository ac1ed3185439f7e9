"""PTX reader: per `.entry`/`.func` instruction lists, opcode counts and call targets.

PTX is split into statements on `;`, not on lines (a `call.uni` spans several lines), after comments are
removed (they contain `;`). Leading `{`/`}` scopes and labels are stripped; braces after the opcode are
vector operands and stay.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
_LINE_COMMENT = re.compile(r"//[^\n]*")
_FUNC_HEAD = re.compile(
    r"(?:\.(?:visible|extern|weak)\s+)?\.(?P<kind>entry|func)\s*(?:\([^)]*\)\s*)?(?P<name>[A-Za-z_$%][\w$]*)\s*\("
)
_LABEL = re.compile(r"^[A-Za-z_$%][\w$@%.]*\s*:")
_PREDICATE = re.compile(r"^@!?%?[\w$]+\s+")
_OPCODE = re.compile(r"^(?P<op>[a-z][\w.]*)\s*(?P<operands>.*)$", re.DOTALL)
_CALL_TARGET = re.compile(r"(?:^|,)\s*(?P<name>[A-Za-z_$][\w$]*)\s*(?:,|$)")
_HEADER_TOOL = re.compile(r"//\s*(Cuda compilation tools, release [^\n]*)")
_VERSION = re.compile(r"^\s*\.version\s+(\S+)", re.MULTILINE)
_TARGET = re.compile(r"^\s*\.target\s+([\w, ]+)", re.MULTILINE)


@dataclass(frozen=True)
class PtxInstruction:
    """One PTX instruction: its full opcode, its operands (whitespace collapsed) and its guard predicate, if
    any."""

    opcode: str  # full opcode, e.g. "ld.global.nc.f32"
    operands: str  # whitespace collapsed
    predicate: str | None = None

    @property
    def text(self) -> str:
        """What patterns are matched against: `opcode operands`, predicate left off."""
        return f"{self.opcode} {self.operands}".strip()


@dataclass(frozen=True)
class PtxFunction:
    """One `.entry` or `.func` of a PTX module: its (mangled) name, its instructions, and the functions it
    calls directly."""

    name: str  # mangled, as in the PTX
    is_entry: bool
    instructions: tuple[PtxInstruction, ...]
    callees: tuple[str, ...]  # direct call targets, in first-call order

    def opcode_counts(self) -> dict[str, int]:
        """How many times each full opcode occurs."""
        return dict(Counter(i.opcode for i in self.instructions))


@dataclass(frozen=True)
class PtxModule:
    """A PTX module as the lint reads it: its functions, the ISA version, target and producer from the header,
    and its code without comments (equal code, equal programs)."""

    functions: tuple[PtxFunction, ...]
    version: str | None  # PTX ISA, ".version 9.0"
    target: str | None  # first `.target` token, e.g. "sm_80"
    producer: str | None  # "Cuda compilation tools, release 13.0, V13.0.88" from the header comment
    code: str = ""  # the module without its comments: equal code, equal programs (labels included)

    def function(self, name: str) -> PtxFunction | None:
        """The function `name` (mangled), or None when the module has none."""
        for f in self.functions:
            if f.name == name:
                return f
        return None

    def reachable(self, name: str) -> tuple[PtxFunction, ...]:
        """`name` and every function it calls, transitively (non-inlined device functions)."""
        seen: dict[str, PtxFunction] = {}
        stack = [name]
        while stack:
            fn = self.function(stack.pop())
            if fn is None or fn.name in seen:
                continue
            seen[fn.name] = fn
            stack.extend(reversed(fn.callees))
        return tuple(seen.values())


def _skip_parens(text: str, start: int) -> int:
    """Index just past the parenthesis group that opens at `start`."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def _body(text: str, start: int) -> tuple[str, int] | None:
    """The brace-balanced body after a function's parameter list, or None for a prototype (`;` first)."""
    for i in range(start, len(text)):
        if text[i] == ";":
            return None
        if text[i] == "{":
            depth = 0
            for j in range(i, len(text)):
                if text[j] == "{":
                    depth += 1
                elif text[j] == "}":
                    depth -= 1
                    if depth == 0:
                        return text[i + 1 : j], j + 1
            return text[i + 1 :], len(text)
    return None


def _statements(body: str) -> list[PtxInstruction]:
    out: list[PtxInstruction] = []
    for raw in body.split(";"):
        stmt = raw.strip()
        while True:  # scopes and labels may be stacked: `} $L__BB0_2: {`
            if stmt[:1] in "{}" and stmt:
                stmt = stmt[1:].lstrip()
                continue
            label = _LABEL.match(stmt)
            if label is not None:
                stmt = stmt[label.end() :].lstrip()
                continue
            break
        if not stmt or stmt.startswith("."):
            continue  # empty or a directive (.reg, .local, .param, .pragma, .loc, ...)
        predicate = None
        pred = _PREDICATE.match(stmt)
        if pred is not None:
            predicate = pred.group(0).strip()
            stmt = stmt[pred.end() :]
        m = _OPCODE.match(stmt)
        if m is None:
            continue
        out.append(PtxInstruction(m.group("op"), " ".join(m.group("operands").split()), predicate))
    return out


def _callees(instructions: list[PtxInstruction]) -> tuple[str, ...]:
    names: list[str] = []
    for ins in instructions:
        if ins.opcode.split(".")[0] != "call":
            continue
        # `call.uni (retval0), target, (params);` or `call.uni target, (params);`
        without_groups = re.sub(r"\([^)]*\)", "", ins.operands)
        m = _CALL_TARGET.search(without_groups)
        if m is not None and m.group("name") not in names:
            names.append(m.group("name"))
    return tuple(names)


def parse_ptx(text: str) -> PtxModule:
    """Read every function body of a PTX module. Unknown statements are skipped, never fatal."""
    producer_m = _HEADER_TOOL.search(text)
    code = _LINE_COMMENT.sub("", _BLOCK_COMMENT.sub("", text))
    version_m = _VERSION.search(code)
    target_m = _TARGET.search(code)
    functions: list[PtxFunction] = []
    pos = 0
    while (head := _FUNC_HEAD.search(code, pos)) is not None:
        after_params = _skip_parens(code, head.end() - 1)
        body = _body(code, after_params)
        if body is None:  # a prototype such as `.extern .func ... vprintf(...);`
            pos = after_params
            continue
        instructions = _statements(body[0])
        functions.append(
            PtxFunction(
                name=head.group("name"),
                is_entry=head.group("kind") == "entry",
                instructions=tuple(instructions),
                callees=_callees(instructions),
            )
        )
        pos = body[1]
    return PtxModule(
        functions=tuple(functions),
        version=version_m.group(1) if version_m else None,
        target=target_m.group(1).split(",")[0].strip() if target_m else None,
        producer=producer_m.group(1).strip() if producer_m else None,
        code=code,
    )
