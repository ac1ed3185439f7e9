"""Compile one HIP source for one AMD arch and read everything lint needs from it.

One clang run makes the device code object (`--cuda-device-only -c`) and prints the kernel resource usage
remarks; `llvm-readelf --notes --symbols` reads the code object's metadata and symbol sizes; `llvm-objdump -d`
disassembles it; and, when a pattern needs it, a second clang run with the same flags writes the LLVM IR.

The flags are hipcc's: it adds `-O3` when no `-O` is given and, unless at -O0, `-mllvm
-amdgpu-early-inline-all=true -mllvm -amdgpu-function-calls=false` (every function inlined), which change the
register figures; lint adds the same, so that its numbers are those of the user's hipcc build (tested against
hipcc in tests/lint/test_hip_real.py).
"""

from __future__ import annotations

import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from gpuemu_ci.lint.amdgpu_code_object import CodeObject, CodeObjectError, parse_readelf
from gpuemu_ci.lint.amdgpu_disasm import IsaFunction, parse_objdump
from gpuemu_ci.lint.amdgpu_remarks import REMARK_FLAG, RemarkLog, parse_remarks
from gpuemu_ci.lint.compile import DEFAULT_TIMEOUT_S, map_parallel
from gpuemu_ci.lint.hip_toolchain import HipToolchain, arch_processor
from gpuemu_ci.lint.llvm_ir import IrModule, parse_ir
from gpuemu_ci.lint.tools import run_tool

HIPCC_INLINING = ("-mllvm", "-amdgpu-early-inline-all=true", "-mllvm", "-amdgpu-function-calls=false")


@dataclass(frozen=True)
class HipCompileJob:
    """One compile: a HIP source for one gfx arch with the kernel's flags."""

    kernel: str  # the [[kernels]] name, for messages
    source: Path
    arch: str  # a target ID: "gfx90a", "gfx90a:xnack+"
    flags: tuple[str, ...] = ()
    include_dirs: tuple[Path, ...] = ()
    defines: tuple[str, ...] = ()
    want_ir: bool = False  # a pattern reads the LLVM IR (or the code's call graph)


@dataclass(frozen=True)
class HipCompileOutput:
    """One HIP compile as it went: the job, the command run, its exit status, clang's log and the remarks read
    from it."""

    job: HipCompileJob
    command: tuple[str, ...]
    returncode: int
    log: str  # clang's stderr: the remarks, warnings and errors
    remarks: RemarkLog
    code_object: CodeObject | None
    isa: tuple[IsaFunction, ...] | None  # None: no llvm-objdump, or it failed (isa_note says why)
    isa_note: str | None
    ir: IrModule | None  # None: not asked for, or it failed (ir_note says why)
    ir_note: str | None
    timed_out: bool
    duration_s: float
    tool_error: str | None = (
        None  # the source compiled but a reading tool failed: no figures, not the user's code
    )

    @property
    def ok(self) -> bool:
        """Whether the compile succeeded and its figures could be read: exit 0, within its time, and no
        reading tool (disassembler, ...) failed."""
        return self.returncode == 0 and not self.timed_out and self.tool_error is None


def hipcc_defaults(flags: tuple[str, ...]) -> tuple[str, ...]:
    """What hipcc adds to these flags for an AMD GPU: -O3 without an -O, and its inlining options above -O0."""
    optimisation = [f for f in flags if f.startswith("-O")]
    added: tuple[str, ...] = () if optimisation else ("-O3",)
    if (optimisation[-1] if optimisation else "-O3") != "-O0":
        added += HIPCC_INLINING
    return added


def base_command(job: HipCompileJob, toolchain: HipToolchain) -> list[str]:
    """clang with everything but the output: the device compile of this source for this arch."""
    assert toolchain.clang is not None
    cmd = [toolchain.clang, "-x", "hip", f"--offload-arch={job.arch}", "--cuda-device-only"]
    cmd += [f"--rocm-path={toolchain.rocm_path}", f"--hip-device-lib-path={toolchain.device_libs}"]
    if toolchain.hip_version:
        cmd.append(f"--hip-version={toolchain.hip_version}")
    cmd += [*hipcc_defaults(job.flags), *job.flags]
    cmd += [f"-I{d}" for d in job.include_dirs] + [f"-D{d}" for d in job.defines]
    return cmd


def _first_line(text: str, fallback: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else fallback


def _read_code_object(
    code_object: Path, toolchain: HipToolchain, timeout: float
) -> tuple[CodeObject | None, str | None]:
    assert toolchain.readelf is not None
    rc, out, err, timed_out = run_tool(
        [toolchain.readelf, "--notes", "--symbols", "--wide", str(code_object)], timeout
    )
    if rc != 0 or timed_out:
        return None, "llvm-readelf: " + _first_line(err, f"exited with status {rc}")
    try:
        return parse_readelf(out), None
    except CodeObjectError as exc:
        return None, f"llvm-readelf: {exc}"


def _disassemble(
    code_object: Path,
    job: HipCompileJob,
    toolchain: HipToolchain,
    sizes: dict[str, tuple[int, int]],
    timeout: float,
) -> tuple[tuple[IsaFunction, ...] | None, str | None]:
    if toolchain.objdump is None:
        return None, "llvm-objdump was not found beside clang"
    cmd = [toolchain.objdump, "-d", f"--mcpu={arch_processor(job.arch)}", str(code_object)]
    rc, out, err, timed_out = run_tool(cmd, timeout)
    if rc != 0 or timed_out:
        return None, "llvm-objdump: " + _first_line(err, f"exited with status {rc}")
    try:
        return parse_objdump(out, sizes), None
    except ValueError as exc:
        return None, f"llvm-objdump: {exc}"


def _emit_ir(
    job: HipCompileJob, toolchain: HipToolchain, out_dir: Path, timeout: float
) -> tuple[IrModule | None, str | None]:
    target = out_dir / "device.ll"
    cmd = [*base_command(job, toolchain), "-S", "-emit-llvm", str(job.source), "-o", str(target)]
    rc, _out, err, timed_out = run_tool(cmd, timeout)
    if rc != 0 or timed_out:
        return None, "clang -emit-llvm: " + _first_line(err, f"exited with status {rc}")
    try:
        return parse_ir(target.read_text(errors="replace")), None
    except (OSError, ValueError) as exc:
        return None, f"clang -emit-llvm: {exc}"


def compile_hip_one(
    job: HipCompileJob,
    toolchain: HipToolchain,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    stop: threading.Event | None = None,
) -> HipCompileOutput:
    """Compile, read the remarks, the metadata, the disassembly and (when asked) the IR. Never raises. Once
    `stop` is set the compile under way is killed (the signal that set it discards the result)."""
    start = time.perf_counter()
    code_object = isa = ir = None
    isa_note = ir_note = tool_error = None
    with tempfile.TemporaryDirectory(prefix="gpuemu-hip-lint-") as tmp:
        out_dir = Path(tmp)
        target = out_dir / "device.co"
        cmd = [*base_command(job, toolchain), "--no-gpu-bundle-output", "-c", REMARK_FLAG]
        cmd += [str(job.source), "-o", str(target)]
        rc, stdout, stderr, timed_out = run_tool(cmd, timeout, stop)
        log = stderr if not stdout.strip() else stdout + stderr
        if rc == 0 and not timed_out:
            code_object, tool_error = _read_code_object(target, toolchain, timeout)
            if code_object is not None:
                isa, isa_note = _disassemble(target, job, toolchain, code_object.functions, timeout)
            if job.want_ir and tool_error is None:
                ir, ir_note = _emit_ir(job, toolchain, out_dir, timeout)
            elif tool_error is None:
                ir_note = "the LLVM IR was not asked for"
    return HipCompileOutput(
        job=job,
        command=tuple(cmd),
        returncode=rc,
        log=log,
        remarks=parse_remarks(log),
        code_object=code_object,
        isa=isa,
        isa_note=isa_note,
        ir=ir,
        ir_note=ir_note,
        timed_out=timed_out,
        duration_s=time.perf_counter() - start,
        tool_error=tool_error,
    )


def compile_hip_all(
    jobs: list[HipCompileJob],
    toolchain: HipToolchain,
    *,
    workers: int | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    stop: threading.Event | None = None,
) -> list[HipCompileOutput]:
    """Every job, `workers` at a time; results in job order. `stop`: see `compile_hip_one`."""
    return map_parallel(lambda j: compile_hip_one(j, toolchain, timeout=timeout, stop=stop), jobs, workers)
