"""The comparable content of a run (baseline or current), read from a baseline document.

A results.json is first trimmed into a baseline document (`baseline.create_baseline`), so both sides of a
diff go through this one parser and are compared field for field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuemu_ci.diff import fields as f

BASELINE_VERSION = "1"


@dataclass(frozen=True)
class DtypeSnapshot:
    dtype: str
    status: str  # passed | failed | error | skipped
    cases_total: int | None
    cases_failed: int | None
    worst_headroom: float | None  # max over cases of error / allowed; <= 1 passes
    max_abs_error: float | None
    comparator: str | None


@dataclass(frozen=True)
class OpSnapshot:
    name: str
    status: str
    comparator: str | None
    skip_reason: str | None
    message: str | None
    dtypes: tuple[DtypeSnapshot, ...]

    def dtype(self, name: str) -> DtypeSnapshot | None:
        return next((d for d in self.dtypes if d.dtype == name), None)


@dataclass(frozen=True)
class ToolSnapshot:
    """The identity that makes two kernel measurements comparable."""

    nvcc: str | None
    ptxas: str | None
    flags: tuple[str, ...]


@dataclass(frozen=True)
class EntrySnapshot:
    """One kernel entry compiled for one arch."""

    kernel: str
    arch: str
    registers: int | None
    spills: int | None  # spill bytes, stores + loads
    stack_frame: int | None
    local_memory: int | None
    shared_memory: int | None
    ptx_instructions: int | None  # total count over the entry's PTX body
    sass_instructions: int | None
    toolchain: ToolSnapshot


@dataclass(frozen=True)
class ViolationSnapshot:
    kernel: str | None
    arch: str | None
    metric: str | None
    severity: str
    message: str


@dataclass(frozen=True)
class KernelSnapshot:
    """One [[kernels]] table."""

    name: str
    status: str  # passed | failed | error | skipped
    source_sha256: str | None
    archs: tuple[str, ...]  # the archs it was compiled for (or meant to be)
    error: str | None  # the compile error, when it did not compile
    violations: tuple[ViolationSnapshot, ...]
    entries: tuple[EntrySnapshot, ...]

    def entry(self, kernel: str, arch: str) -> EntrySnapshot | None:
        return next((e for e in self.entries if e.kernel == kernel and e.arch == arch), None)


@dataclass(frozen=True)
class Snapshot:
    created_at: str | None
    tool_version: str | None
    generator_version: str | None
    results_schema_version: str | None
    seed: int | None
    suite: str | None
    verdict: str | None
    cut_short: bool
    config_sha256: str | None
    config_path: str | None
    project: str | None
    commit: str | None
    ref: str | None
    ci: dict[str, Any] | None
    toolchain: dict[str, Any] | None  # the lint toolchain (nvcc/ptxas versions, SASS tool) of the run
    ops: tuple[OpSnapshot, ...]
    kernels: tuple[KernelSnapshot, ...]

    def op(self, name: str) -> OpSnapshot | None:
        return next((o for o in self.ops if o.name == name), None)

    def kernel(self, name: str) -> KernelSnapshot | None:
        return next((k for k in self.kernels if k.name == name), None)


def parse_snapshot(data: Any) -> Snapshot:
    """A baseline document -> Snapshot. Raises fields.FormatError naming the first bad field."""
    doc = f.table(data, "")
    version = f.string(doc, "baseline_version", "", required=True)
    if version != BASELINE_VERSION:
        raise f.FormatError(
            "baseline_version",
            f"is {version!r}; this gpuemu-ci reads version "
            f"{BASELINE_VERSION!r} (regenerate the baseline with this version)",
        )
    tool = f.optional_table(doc, "tool", "") or {}
    run = f.optional_table(doc, "run", "") or {}
    config = f.optional_table(doc, "config", "") or {}
    git = f.optional_table(doc, "git", "") or {}
    return Snapshot(
        created_at=f.string(doc, "created_at", ""),
        tool_version=f.string(tool, "version", "tool"),
        generator_version=f.string(doc, "generator_version", ""),
        results_schema_version=f.string(doc, "results_schema_version", ""),
        seed=f.integer(run, "seed", "run"),
        suite=f.string(run, "suite", "run"),
        verdict=f.string(run, "verdict", "run"),
        cut_short=f.flag(run, "cut_short", "run"),
        config_sha256=f.string(config, "sha256", "config"),
        config_path=f.string(config, "path", "config"),
        project=f.string(config, "project", "config"),
        commit=f.string(git, "commit", "git"),
        ref=f.string(git, "ref", "git"),
        ci=f.optional_table(doc, "ci", ""),
        toolchain=f.optional_table(doc, "toolchain", ""),
        ops=tuple(_op(f.table(op, where), where) for where, op in f.items(doc, "ops", "")),
        kernels=tuple(
            _kernel(f.table(k, where), where) for where, k in f.items(doc, "kernels", "", required=False)
        ),
    )


def _op(op: dict[str, Any], where: str) -> OpSnapshot:
    return OpSnapshot(
        name=f.string(op, "name", where, required=True) or "",
        status=f.string(op, "status", where, required=True) or "",
        comparator=f.string(op, "comparator", where),
        skip_reason=f.string(op, "skip_reason", where),
        message=f.string(op, "message", where),
        dtypes=tuple(
            _dtype(f.table(d, path), path) for path, d in f.items(op, "dtypes", where, required=False)
        ),
    )


def _dtype(d: dict[str, Any], where: str) -> DtypeSnapshot:
    return DtypeSnapshot(
        dtype=f.string(d, "dtype", where, required=True) or "",
        status=f.string(d, "status", where, required=True) or "",
        cases_total=f.integer(d, "cases_total", where),
        cases_failed=f.integer(d, "cases_failed", where),
        worst_headroom=f.number(d, "worst_headroom", where),
        max_abs_error=f.number(d, "max_abs_error", where),
        comparator=f.string(d, "comparator", where),
    )


def _kernel(k: dict[str, Any], where: str) -> KernelSnapshot:
    violations = []
    for path, v in f.items(k, "violations", where, required=False):
        v = f.table(v, path)
        violations.append(
            ViolationSnapshot(
                kernel=f.string(v, "kernel", path),
                arch=f.string(v, "arch", path),
                metric=f.string(v, "metric", path),
                severity=f.string(v, "severity", path) or "error",
                message=f.string(v, "message", path) or "",
            )
        )
    return KernelSnapshot(
        name=f.string(k, "name", where, required=True) or "",
        status=f.string(k, "status", where, required=True) or "",
        source_sha256=f.string(k, "source_sha256", where),
        archs=f.string_list(k, "archs", where),
        error=f.string(k, "error", where),
        violations=tuple(violations),
        entries=tuple(
            _entry(f.table(e, path), path) for path, e in f.items(k, "entries", where, required=False)
        ),
    )


def _entry(e: dict[str, Any], where: str) -> EntrySnapshot:
    tool = f.optional_table(e, "toolchain", where) or {}
    return EntrySnapshot(
        kernel=f.string(e, "kernel", where, required=True) or "",
        arch=f.string(e, "arch", where, required=True) or "",
        registers=f.integer(e, "registers", where),
        spills=f.integer(e, "spills", where),
        stack_frame=f.integer(e, "stack_frame", where),
        local_memory=f.integer(e, "local_memory", where),
        shared_memory=f.integer(e, "shared_memory", where),
        ptx_instructions=f.integer(e, "ptx_instructions_total", where),
        sass_instructions=f.integer(e, "sass_instructions_total", where),
        toolchain=ToolSnapshot(
            nvcc=f.string(tool, "nvcc", f"{where}.toolchain"),
            ptxas=f.string(tool, "ptxas", f"{where}.toolchain"),
            flags=f.string_list(tool, "flags", f"{where}.toolchain"),
        ),
    )
