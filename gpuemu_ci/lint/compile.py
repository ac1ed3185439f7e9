"""Compile one kernel source for one arch and capture everything lint reads: the ptxas -v log, the PTX, SASS.

A `.cu` goes through `nvcc -cubin -Xptxas -v --keep` (one front-end run gives both the cubin and the exact
PTX ptxas saw), or where there is no nvcc through NVRTC to PTX and then the same `ptxas -v` (lint/nvrtc.py);
a `.ptx` goes straight to `ptxas -v`. Jobs run in a thread pool: the work is in the child processes.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TypeVar

from gpuemu_ci.lint import nvrtc
from gpuemu_ci.lint.model import Toolchain
from gpuemu_ci.lint.ptx import PtxModule, parse_ptx
from gpuemu_ci.lint.ptxas_log import PtxasLog, parse_ptxas_log
from gpuemu_ci.lint.sass import SassFunction, parse_nvdisasm_json, parse_sass_text
from gpuemu_ci.lint.tools import run_tool
from gpuemu_ci.results.kernels import COMPILE_LOG_LIMIT, CompileError

DEFAULT_TIMEOUT_S = 600.0
_Job = TypeVar("_Job")
_Out = TypeVar("_Out")

_NVCC_ERROR = re.compile(
    r"^(?P<file>.+?)\((?P<line>\d+)\): (?:catastrophic )?error(?: #[\w-]+)?: (?P<msg>.+)$", re.MULTILINE
)
_GCC_ERROR = re.compile(
    r"^(?P<file>[^\s:][^:\n]*):(?P<line>\d+):(?:\d+:)? (?:fatal )?error: (?P<msg>.+)$", re.MULTILINE
)
_FATAL = re.compile(r"^(?:nvcc|ptxas|cicc|cudafe\+\+)\s+fatal\s*:\s*(?P<msg>.+)$", re.MULTILINE)


class SourceKind(StrEnum):
    """What a kernel's source file is: CUDA C++ (compiled by NVRTC or nvcc to PTX, then by ptxas) or PTX
    (straight to ptxas), by its suffix."""

    CUDA = "cu"
    PTX = "ptx"


def source_kind(path: Path) -> SourceKind:
    """PTX for a `.ptx` file (any case), CUDA otherwise."""
    return SourceKind.PTX if path.suffix.lower() == ".ptx" else SourceKind.CUDA


@dataclass(frozen=True)
class CompileJob:
    """One compile: a source for one arch with the kernel's flags."""

    kernel: str  # the [[kernels]] name, for messages
    source: Path
    arch: str
    flags: tuple[str, ...] = ()
    include_dirs: tuple[Path, ...] = ()
    defines: tuple[str, ...] = ()

    @property
    def kind(self) -> SourceKind:
        """The job's source kind, from its file's suffix."""
        return source_kind(self.source)


@dataclass(frozen=True)
class CompileOutput:
    """One compile as it went: the job, the command run, its exit status and log, and the ptxas figures read
    from the log."""

    job: CompileJob
    command: tuple[str, ...]
    returncode: int
    log: str  # the compiler's stderr (ptxas -v goes there)
    ptxas: PtxasLog
    ptx: PtxModule | None
    sass: tuple[SassFunction, ...] | None  # None: no SASS tool, or it failed (see sass_note)
    sass_note: str | None
    timed_out: bool
    duration_s: float
    unsupported: str | None = None  # why the front end (NVRTC) cannot compile this as nvcc would

    @property
    def ok(self) -> bool:
        """Whether the compile succeeded: exit 0, within its time, and nothing the front end could not compile
        as nvcc would."""
        return self.returncode == 0 and not self.timed_out and self.unsupported is None


def compile_command(job: CompileJob, toolchain: Toolchain, out_dir: Path) -> list[str]:
    """The exact command for a job; the cubin goes to `out_dir/kernel.cubin`."""
    cubin = str(out_dir / "kernel.cubin")
    if job.kind is SourceKind.PTX:
        assert toolchain.ptxas is not None
        return [toolchain.ptxas, "-v", f"-arch={job.arch}", "-o", cubin, *job.flags, str(job.source)]
    assert toolchain.nvcc is not None
    cmd = [
        toolchain.nvcc,
        "-cubin",
        f"-arch={job.arch}",
        "-Xptxas",
        "-v",
        "--keep",
        "--keep-dir",
        str(out_dir),
    ]
    cmd += ["-o", cubin, *job.flags]
    cmd += [f"-I{d}" for d in job.include_dirs]
    cmd += [f"-D{d}" for d in job.defines]
    cmd.append(str(job.source))
    return cmd


def disassemble(
    cubin: Path, toolchain: Toolchain, timeout: float, stop: threading.Event | None = None
) -> tuple[tuple[SassFunction, ...] | None, str | None]:
    """SASS of a cubin: nvdisasm JSON, else nvdisasm text, else cuobjdump. (functions, note on failure)."""
    attempts: list[tuple[list[str], bool]] = []
    if toolchain.nvdisasm:
        attempts.append(([toolchain.nvdisasm, "--emit-json", str(cubin)], True))  # 13.2+ only
        attempts.append(([toolchain.nvdisasm, "-c", str(cubin)], False))
    if toolchain.cuobjdump:
        attempts.append(([toolchain.cuobjdump, "-sass", str(cubin)], False))
    if not attempts:
        return None, "no SASS tool (cuobjdump or nvdisasm) found"
    notes: list[str] = []
    for cmd, is_json in attempts:
        rc, out, err, timed_out = run_tool(cmd, timeout, stop)
        if rc != 0 or timed_out:
            notes.append(f"{Path(cmd[0]).name} {cmd[1]}: " + (err.strip().splitlines() or ["failed"])[-1])
            continue
        try:
            functions = parse_nvdisasm_json(out) if is_json else parse_sass_text(out)
        except ValueError as exc:
            notes.append(str(exc))
            continue
        # A cross-version tool can print nothing for a cubin it does not understand: then try the next one.
        if sum(f.total for f in functions) > 0:
            return functions, None
        notes.append(f"{Path(cmd[0]).name} {cmd[1]}: no instructions")
    return None, "; ".join(notes)


def _kept_ptx(out_dir: Path, source: Path) -> PtxModule | None:
    preferred = out_dir / (source.stem + ".ptx")
    candidates = [preferred] if preferred.is_file() else sorted(out_dir.glob("*.ptx"))
    if not candidates:
        return None
    return parse_ptx(candidates[0].read_text(errors="replace"))


def _nvrtc_then_ptxas(
    job: CompileJob, toolchain: Toolchain, out_dir: Path, timeout: float, stop: threading.Event | None
) -> tuple[list[str], int, str, bool, str | None]:
    """NVRTC to PTX (kept as out_dir/<stem>.ptx), then `ptxas -v`: (command shown, returncode, log, timed out,
    why NVRTC cannot compile this as nvcc would)."""
    assert toolchain.nvrtc is not None and toolchain.ptxas is not None
    try:
        options, ptxas_options = nvrtc.translate_flags(job.flags)
    except nvrtc.NvrtcUnsupported as exc:
        return [], -1, "", False, str(exc)
    options += [f"-I{d}" for d in job.include_dirs] + [f"-D{d}" for d in job.defines]
    ptx = out_dir / (job.source.stem + ".ptx")
    first = nvrtc.command(toolchain.nvrtc, job.source, ptx, job.arch, options)
    rc, stdout, stderr, timed_out = run_tool(first, timeout, stop)
    log = stdout + stderr
    if rc != 0 or timed_out:
        reason = nvrtc.limitation(log) if rc == 1 else None
        return first, rc if rc != 0 else -1, log, timed_out, reason
    second = [toolchain.ptxas, "-v", f"-arch={job.arch}", "-o", str(out_dir / "kernel.cubin"), *ptxas_options]
    second.append(str(ptx))
    rc, stdout, stderr, timed_out = run_tool(second, timeout, stop)
    return [*first, "&&", *second], rc, log + stdout + stderr, timed_out, None


def compile_one(
    job: CompileJob,
    toolchain: Toolchain,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    stop: threading.Event | None = None,
) -> CompileOutput:
    """Compile, parse the ptxas log, read the PTX and (when a tool exists) the SASS. Never raises. Once `stop`
    is set, the tools under way are killed and none starts (the output then says nothing useful: the caller
    that set `stop` discards it)."""
    start = time.perf_counter()
    unsupported = None
    with tempfile.TemporaryDirectory(prefix="gpuemu-lint-") as tmp:
        out_dir = Path(tmp)
        if job.kind is SourceKind.CUDA and toolchain.frontend == "nvrtc":
            cmd, rc, log, timed_out, unsupported = _nvrtc_then_ptxas(job, toolchain, out_dir, timeout, stop)
        else:
            cmd = compile_command(job, toolchain, out_dir)
            rc, stdout, stderr, timed_out = run_tool(cmd, timeout, stop)
            log = stderr if not stdout.strip() else stdout + stderr
        ptxas = parse_ptxas_log(log, default_arch=job.arch)
        ptx: PtxModule | None = None
        sass: tuple[SassFunction, ...] | None = None
        note: str | None = None
        if rc == 0 and not timed_out and unsupported is None:
            if job.kind is SourceKind.PTX:
                ptx = parse_ptx(job.source.read_text(errors="replace"))
            else:
                ptx = _kept_ptx(out_dir, job.source)
            sass, note = disassemble(out_dir / "kernel.cubin", toolchain, timeout, stop)
    return CompileOutput(
        job=job,
        command=tuple(cmd),
        returncode=rc,
        log=log,
        ptxas=ptxas,
        ptx=ptx,
        sass=sass,
        sass_note=note,
        timed_out=timed_out,
        duration_s=time.perf_counter() - start,
        unsupported=unsupported,
    )


def map_parallel(
    work: Callable[[_Job], _Out], jobs: Sequence[_Job], workers: int | None = None
) -> list[_Out]:
    """`work` over every job, `workers` at a time (default: the CPU count), results in job order. Threads:
    the work is in the compilers' child processes."""
    if not jobs:
        return []
    n = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    if n == 1:
        return [work(j) for j in jobs]
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="gpuemu-lint") as pool:
        return list(pool.map(work, jobs))


def compile_all(
    jobs: Sequence[CompileJob],
    toolchain: Toolchain,
    *,
    workers: int | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    stop: threading.Event | None = None,
) -> list[CompileOutput]:
    """Run every job, `workers` at a time (default: the CPU count); results in job order. `stop`: see
    `compile_one`."""
    return map_parallel(lambda j: compile_one(j, toolchain, timeout=timeout, stop=stop), jobs, workers)


def parse_compile_error(output: CompileOutput) -> CompileError:
    """The first error the compiler printed, with the file and line it points at when it gives them."""
    log, arch = output.log, output.job.arch
    if output.timed_out:
        return CompileError(
            f"the compiler did not finish within the time limit ({arch})",
            None,
            None,
            arch,
            log[-COMPILE_LOG_LIMIT:],
        )
    candidates = []
    for pattern in (_NVCC_ERROR, _GCC_ERROR):
        m = pattern.search(log)
        if m is not None:
            candidates.append((m.start(), m.group("msg").strip(), m.group("file"), int(m.group("line"))))
    if candidates:
        _, msg, file, line = min(candidates)
        return CompileError(msg, file, line, arch, log[-COMPILE_LOG_LIMIT:])
    ptxas_errors = output.ptxas.errors()
    for diag in ptxas_errors:
        if diag.file is not None:
            where = "" if output.job.kind is SourceKind.PTX else f" (line {diag.line} of the generated PTX)"
            file = str(output.job.source)
            ptx_line = diag.line if output.job.kind is SourceKind.PTX else None
            return CompileError(
                f"ptxas: {diag.message}{where}", file, ptx_line, arch, log[-COMPILE_LOG_LIMIT:]
            )
    m = _FATAL.search(log)
    if m is not None:
        return CompileError(m.group("msg").strip(), None, None, arch, log[-COMPILE_LOG_LIMIT:])
    if ptxas_errors:
        return CompileError(f"ptxas: {ptxas_errors[0].message}", None, None, arch, log[-COMPILE_LOG_LIMIT:])
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    first = lines[0] if lines else f"the compiler exited with status {output.returncode} and printed nothing"
    return CompileError(first, None, None, arch, log[-COMPILE_LOG_LIMIT:])
