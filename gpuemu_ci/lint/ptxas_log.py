"""Tolerant parser for `ptxas -v` output (nvcc `-Xptxas -v`, `--resource-usage`, NVRTC program logs).

The format gained fields in CUDA 12.4, 12.6 and 12.9 and strict grammars broke on each change, so this is a
line state machine that reads the `Used ...` line field by field and keeps any field it does not know in
`unparsed` instead of failing. Lines may carry any prefix (MSVC's `1>  `, NVRTC's `ptxas         .`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum

PTXAS_LINE = re.compile(
    r"ptxas(?:\s+(?P<file>\S+), line (?P<line>\d+);)?"
    r"\s+(?P<level>info|warning|error|fatal)\s*:\s*(?P<msg>.*?)\s*$"
)
GMEM = re.compile(r"^(?P<gmem>\d+) bytes gmem(?P<rest>.*)$")
COMPILING = re.compile(r"^Compiling entry function '(?P<name>[^']+)' for '(?P<arch>(?:sm|compute)_\w+)'$")
FUNCPROPS = re.compile(r"^Function properties for (?P<name>.+?)$")
FRAME = re.compile(
    r"(?P<stack>\d+) bytes stack frame, (?P<st>\d+) bytes spill stores, (?P<ld>\d+) bytes spill loads"
)
USED = re.compile(r"^Used (?P<regs>\d+) registers(?P<rest>.*)$")
COMPILE_TIME = re.compile(r"^Compile time = [\d.]+ ms$")
OVERRIDE = re.compile(
    r"^Overriding maximum register limit (?P<old>\d+) for '(?P<name>[^']+)' with\s+(?P<new>\d+)"
    r" of maxrregcount option$"
)

_BARRIERS = re.compile(r"^used (\d+) barriers?$")
_SMEM = re.compile(r"^(\d+)(?:\+(\d+))? bytes smem$")
_LMEM = re.compile(r"^(\d+)(?:\+(\d+))? bytes lmem$")
_CMEM = re.compile(r"^(\d+) bytes cmem\[(\d+)\]$")
_CUMULATIVE = re.compile(r"^(\d+) bytes cumulative stack size$")
_TEXTURES = re.compile(r"^(\d+) (textures|samplers|surfaces)$")


class Level(StrEnum):
    """How serious a ptxas diagnostic is."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    FATAL = "fatal"


@dataclass(frozen=True)
class Diagnostic:
    """A ptxas warning, error or fatal line (`ptxas FILE, line N; error : ...` carries a location)."""

    level: Level
    message: str
    file: str | None = None
    line: int | None = None


@dataclass(frozen=True)
class FunctionUsage:
    """Resources of one function. Entries have a `Used` line; device functions only a frame line."""

    name: str  # mangled, exactly as ptxas printed it
    arch: str | None
    is_entry: bool
    stack_frame: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    registers: int | None = None
    barriers: int | None = None
    shared_memory: int | None = None  # static part of `A+B bytes smem`
    shared_memory_extra: int | None = None  # the `+B` of legacy logs
    local_memory: int | None = None  # legacy `A+B bytes lmem`, A+B
    cumulative_stack: int | None = None
    constant: tuple[tuple[int, int], ...] = ()  # (bank, bytes)
    resources: tuple[tuple[str, int], ...] = ()  # ("textures", 1), ...
    max_registers_override: int | None = None  # from "Overriding maximum register limit ..."
    unparsed: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModuleUsage:
    """The `N bytes gmem, ...` line that opens each ptxas run: module-wide globals and constant banks."""

    arch: str | None
    gmem: int
    constant: tuple[tuple[int, int], ...] = ()
    unparsed: tuple[str, ...] = ()


@dataclass(frozen=True)
class PtxasLog:
    """What `ptxas -v` printed, read: each function's usage per arch, each module's, the diagnostics, and the
    info lines the parser did not recognise (kept so nothing is silently ignored)."""

    functions: tuple[FunctionUsage, ...]
    modules: tuple[ModuleUsage, ...]
    diagnostics: tuple[Diagnostic, ...]
    unparsed_lines: tuple[str, ...]  # ptxas info lines of a shape this parser does not know

    def entries(self, arch: str | None = None) -> tuple[FunctionUsage, ...]:
        """The kernels' (entry functions') usage, for `arch` only when given."""
        return tuple(f for f in self.functions if f.is_entry and (arch is None or f.arch == arch))

    def device_functions(self, arch: str | None = None) -> tuple[FunctionUsage, ...]:
        """The device functions' usage, for `arch` only when given."""
        return tuple(f for f in self.functions if not f.is_entry and (arch is None or f.arch == arch))

    def errors(self) -> tuple[Diagnostic, ...]:
        """The error and fatal diagnostics."""
        return tuple(d for d in self.diagnostics if d.level in (Level.ERROR, Level.FATAL))

    def warnings(self) -> tuple[Diagnostic, ...]:
        """The warning diagnostics."""
        return tuple(d for d in self.diagnostics if d.level is Level.WARNING)


@dataclass
class _Fn:
    """Mutable record while its lines are being read; frozen into FunctionUsage at the end."""

    name: str
    arch: str | None
    is_entry: bool
    block: int
    values: dict[str, int] = field(default_factory=dict)
    constant: list[tuple[int, int]] = field(default_factory=list)
    resources: list[tuple[str, int]] = field(default_factory=list)
    unparsed: list[str] = field(default_factory=list)

    def freeze(self, block_arch: dict[int, str]) -> FunctionUsage:
        # A device function printed before the first entry of its run gets that run's arch afterwards.
        arch = self.arch or block_arch.get(self.block)
        return FunctionUsage(
            name=self.name,
            arch=arch,
            is_entry=self.is_entry,
            constant=tuple(self.constant),
            resources=tuple(self.resources),
            unparsed=tuple(self.unparsed),
            **self.values,
        )


def _parse_fields(rest: str, fn: _Fn | None, constant: list[tuple[int, int]], unparsed: list[str]) -> None:
    """Read the comma-separated fields after `Used N registers` (or `N bytes gmem`)."""
    for raw in rest.split(","):
        part = raw.strip()
        if not part:
            continue
        if (m := _CMEM.match(part)) is not None:
            constant.append((int(m.group(2)), int(m.group(1))))
        elif fn is not None and (m := _BARRIERS.match(part)) is not None:
            fn.values["barriers"] = int(m.group(1))
        elif fn is not None and (m := _SMEM.match(part)) is not None:
            fn.values["shared_memory"] = int(m.group(1))
            if m.group(2) is not None:
                fn.values["shared_memory_extra"] = int(m.group(2))
        elif fn is not None and (m := _LMEM.match(part)) is not None:
            fn.values["local_memory"] = int(m.group(1)) + int(m.group(2) or 0)
        elif fn is not None and (m := _CUMULATIVE.match(part)) is not None:
            fn.values["cumulative_stack"] = int(m.group(1))
        elif fn is not None and (m := _TEXTURES.match(part)) is not None:
            fn.resources.append((m.group(2), int(m.group(1))))
        else:
            unparsed.append(part)


def parse_ptxas_log(text: str, *, default_arch: str | None = None) -> PtxasLog:
    """Parse ptxas -v output. Never raises on unknown content: it lands in `unparsed`/`unparsed_lines`.

    `default_arch` is used for functions whose run never names an arch (a log with only device functions).
    """
    functions: list[_Fn] = []
    modules: list[ModuleUsage] = []
    diagnostics: list[Diagnostic] = []
    unparsed_lines: list[str] = []
    overrides: dict[str, int] = {}
    block = 0
    block_arch: dict[int, str] = {}
    arch: str | None = None
    entry: _Fn | None = None  # the entry opened by the last `Compiling entry function`
    armed: _Fn | None = None  # the function whose frame line comes next

    for line in text.splitlines():
        m = PTXAS_LINE.search(line)
        if m is None:
            # Continuation lines: the indented frame line, NVRTC's `ptxas         .`, MSVC's `1>      `.
            frame = FRAME.search(line)
            if frame is not None and armed is not None:
                armed.values.update(
                    stack_frame=int(frame.group("stack")),
                    spill_stores=int(frame.group("st")),
                    spill_loads=int(frame.group("ld")),
                )
                armed = None
            continue
        level, msg = Level(m.group("level")), m.group("msg")
        if level is not Level.INFO:
            diagnostics.append(
                Diagnostic(level, msg, m.group("file"), int(m.group("line")) if m.group("line") else None)
            )
            continue
        if (g := GMEM.match(msg)) is not None:
            block += 1
            arch, entry, armed = None, None, None
            constant: list[tuple[int, int]] = []
            unparsed: list[str] = []
            _parse_fields(g.group("rest"), None, constant, unparsed)
            modules.append(ModuleUsage(None, int(g.group("gmem")), tuple(constant), tuple(unparsed)))
        elif (c := COMPILING.match(msg)) is not None:
            arch = c.group("arch")
            block_arch.setdefault(block, arch)
            entry = _Fn(c.group("name"), arch, True, block)
            if c.group("name") in overrides:
                entry.values["max_registers_override"] = overrides[c.group("name")]
            functions.append(entry)
            armed = None
        elif (p := FUNCPROPS.match(msg)) is not None:
            name = p.group("name")
            if entry is not None and entry.name == name and "stack_frame" not in entry.values:
                armed = entry
            else:
                # No `Compiling entry function` for this name: a non-inlined device function. It has no
                # `Used` line and must not be attached to the previous kernel.
                armed = _Fn(name, arch, False, block)
                functions.append(armed)
                entry = None
        elif (u := USED.match(msg)) is not None:
            if entry is None:
                unparsed_lines.append(msg)
                continue
            entry.values["registers"] = int(u.group("regs"))
            _parse_fields(u.group("rest"), entry, entry.constant, entry.unparsed)
        elif (o := OVERRIDE.match(msg)) is not None:
            overrides[o.group("name")] = int(o.group("new"))
        elif COMPILE_TIME.match(msg) is not None:
            continue  # timing noise: never part of a record
        else:
            unparsed_lines.append(msg)

    if default_arch is not None:
        block_arch = {b: block_arch.get(b, default_arch) for b in range(block + 1)}
    frozen_modules = tuple(
        ModuleUsage(block_arch.get(i + 1, default_arch), m.gmem, m.constant, m.unparsed)
        for i, m in enumerate(modules)
    )
    return PtxasLog(
        functions=tuple(f.freeze(block_arch) for f in functions),
        modules=frozen_modules,
        diagnostics=tuple(diagnostics),
        unparsed_lines=tuple(unparsed_lines),
    )
