"""Parser for clang's AMDGPU resource usage remarks (`-Rpass-analysis=kernel-resource-usage`, clang 15 and later).

clang prints one remark per figure, each on its own line, after a `Function Name:` remark that opens the
function's block:

    k.hip:7:1: remark: Function Name: gelu [-Rpass-analysis=kernel-resource-usage]
    k.hip:7:1: remark:     SGPRs: 11 [-Rpass-analysis=kernel-resource-usage]
    k.hip:7:1: remark:     VGPRs: 8 [-Rpass-analysis=kernel-resource-usage]
    ...
    k.hip:7:1: remark:     LDS Size [bytes/block]: 0 [-Rpass-analysis=kernel-resource-usage]

Kernels get an `LDS Size` line, other functions do not; `AGPRs` appears only for archs that have them
(gfx908, gfx90a, gfx94x). The source excerpt and caret lines clang prints under each remark are skipped. A
figure this parser does not know is kept verbatim in `unparsed`, never dropped and never fatal, so that a
newer clang's extra fields are seen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

REMARK_FLAG = "-Rpass-analysis=kernel-resource-usage"
_REMARK = re.compile(
    r"^(?:(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): )?remark: (?P<body>.*?)\s*"
    r"\[-Rpass-analysis=kernel-resource-usage\]\s*$"
)
_FIGURE = re.compile(r"^\s*(?P<name>[A-Za-z][A-Za-z ]*?)(?:\s*\[(?P<unit>[^\]]+)\])?:\s*(?P<value>\S.*?)\s*$")
_DIAGNOSTIC = re.compile(
    r"^(?:(?P<file>.+?):(?P<line>\d+):(?:\d+:)? |clang(?:\+\+)?(?:-\d+)?: )?"
    r"(?P<level>warning|error|fatal error): (?P<msg>.*)$"
)

# The remark's name (and unit) -> the attribute of FunctionRemarks it fills.
FIGURES: dict[str, str] = {
    "SGPRs": "sgprs",
    "VGPRs": "vgprs",
    "AGPRs": "agprs",
    "ScratchSize [bytes/lane]": "scratch_bytes",
    "Occupancy [waves/SIMD]": "occupancy",
    "SGPRs Spill": "sgpr_spills",
    "VGPRs Spill": "vgpr_spills",
    "LDS Size [bytes/block]": "lds_bytes",
}
_FLAGS: dict[str, str] = {"Dynamic Stack": "dynamic_stack"}  # clang 18 and later: "True" / "False"


@dataclass
class FunctionRemarks:
    """The figures clang reported for one function (None: not reported)."""

    name: str  # the symbol, mangled as clang printed it
    file: str | None = None
    line: int | None = None
    sgprs: int | None = None
    vgprs: int | None = None
    agprs: int | None = None
    scratch_bytes: int | None = None
    occupancy: int | None = None
    sgpr_spills: int | None = None
    vgpr_spills: int | None = None
    lds_bytes: int | None = None
    dynamic_stack: bool | None = None
    unparsed: list[str] = field(default_factory=list)

    @property
    def is_kernel(self) -> bool:
        """clang reports LDS for kernels only."""
        return self.lds_bytes is not None


@dataclass(frozen=True)
class Diagnostic:
    """A warning or error clang printed while compiling, with where it points when it says."""

    level: str  # "warning", "error", "fatal error"
    message: str
    file: str | None = None
    line: int | None = None


@dataclass(frozen=True)
class RemarkLog:
    """Everything one compile printed: the functions' figures in order, the warnings and errors."""

    functions: tuple[FunctionRemarks, ...]
    diagnostics: tuple[Diagnostic, ...] = ()
    unparsed_lines: tuple[str, ...] = ()  # remark lines outside any function block

    def kernels(self) -> tuple[FunctionRemarks, ...]:
        """The remarks of the kernels (entry points), device functions left out."""
        return tuple(f for f in self.functions if f.is_kernel)

    def function(self, name: str) -> FunctionRemarks | None:
        """The remarks of function `name`, or None when the log has none."""
        return next((f for f in self.functions if f.name == name), None)

    def errors(self) -> tuple[Diagnostic, ...]:
        """The diagnostics that are errors (anything but a warning)."""
        return tuple(d for d in self.diagnostics if d.level != "warning")


def _set_figure(function: FunctionRemarks, body: str) -> None:
    m = _FIGURE.match(body)
    if m is None:
        function.unparsed.append(body.strip())
        return
    key = m.group("name") + (f" [{m.group('unit')}]" if m.group("unit") else "")
    value = m.group("value")
    if key in FIGURES and value.isdigit():
        setattr(function, FIGURES[key], int(value))
    elif key in _FLAGS and value.lower() in ("true", "false"):
        setattr(function, _FLAGS[key], value.lower() == "true")
    else:
        function.unparsed.append(body.strip())


def parse_remarks(text: str) -> RemarkLog:
    """Every function block of a compile's stderr, its warnings and errors. Never raises."""
    functions: list[FunctionRemarks] = []
    diagnostics: list[Diagnostic] = []
    loose: list[str] = []
    current: FunctionRemarks | None = None
    for raw in text.splitlines():
        m = _REMARK.match(raw)
        if m is None:
            d = _DIAGNOSTIC.match(raw)
            if d is not None:
                line = int(d.group("line")) if d.group("line") else None
                diagnostics.append(
                    Diagnostic(d.group("level"), d.group("msg").strip(), d.group("file"), line)
                )
            continue  # source excerpts, carets, notes
        body = m.group("body")
        if body.startswith("Function Name:"):
            current = FunctionRemarks(
                name=body.split(":", 1)[1].strip(),
                file=m.group("file"),
                line=int(m.group("line")) if m.group("line") else None,
            )
            functions.append(current)
        elif current is None:
            loose.append(body.strip())
        else:
            _set_figure(current, body)
    return RemarkLog(tuple(functions), tuple(diagnostics), tuple(loose))
