"""Real nvcc/ptxas compiles of the fixture sources: lint must report exactly what `nvcc -Xptxas -v` prints."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import msgspec
import pytest

from gpuemu_ci.config.model import ArtifactChecks
from gpuemu_ci.errors import ConfigError, ExitCode, InfraError
from gpuemu_ci.lint import LintReport, discover_toolchain, lint_kernels
from gpuemu_ci.results.base import Severity
from gpuemu_ci.results.kernels import ArchSource, KernelStatus
from tests.lint.support_lint import PTX, SRC, ptx_pattern, requires_nvcc, sass_pattern, spec
from tests.support_tiers import runs_a_gate

pytestmark = requires_nvcc

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")


def nvcc_says(
    source: Path, arch: str, flags: tuple[str, ...], tmp: Path
) -> dict[str, tuple[int, int, int, int]]:
    """Run `nvcc -cubin -Xptxas -v` itself; read (registers, stack, spill stores, spill loads) per entry."""
    proc = subprocess.run(
        [
            "nvcc",
            "-cubin",
            f"-arch={arch}",
            "-Xptxas",
            "-v",
            *flags,
            "-o",
            str(tmp / "ref.cubin"),
            str(source),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    found: dict[str, tuple[int, int, int, int]] = {}
    name, frame = None, None
    for line in proc.stderr.splitlines():
        if (m := _ENTRY.search(line)) is not None:
            name, frame = m.group(1), None
        elif name and (m := _FRAME.search(line)) is not None and frame is None:
            frame = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        elif name and frame and (m := _USED.search(line)) is not None:
            found[name] = (int(m.group(1)), *frame)
            name = None
    return found


CASES = [
    spec(
        "spill",
        SRC / "spill.cu",
        ("sm_80", "sm_90"),
        flags=("-maxrregcount=16",),
        checks=ArtifactChecks(max_spills=0),
    ),
    spec("noinline", SRC / "noinline.cu", ()),
    spec("templ", SRC / "templ.cu", entries=("ops::add", "scale<float, 4>")),
    spec("gelu", SRC / "gelu.cu", checks=ArtifactChecks(max_registers=8)),
    spec(
        "matmul",
        SRC / "matmul.cu",
        ("sm_90",),
        checks=ArtifactChecks(
            required_patterns=(ptx_pattern(r"^fma\.rn\.f32"),),
            forbidden_patterns=(ptx_pattern(r"^bar\.sync"), sass_pattern(r"^BAR")),
        ),
    ),
]


@pytest.fixture(scope="module")
def no_sass_toolchain():
    return dataclasses.replace(discover_toolchain(), nvdisasm=None, cuobjdump=None)


@pytest.fixture(scope="module")
@runs_a_gate
def report(no_sass_toolchain) -> LintReport:
    return lint_kernels(CASES, jobs=2, root=SRC.parent, toolchain=no_sass_toolchain)


def _kernel(report: LintReport, name: str):
    return next(k for k in report.kernels if k.name == name)


@pytest.mark.slow
def test_metrics_equal_what_nvcc_prints(report: LintReport, tmp_path: Path) -> None:
    compared = 0
    for case in CASES:
        result = _kernel(report, case.name)
        for arch in result.archs:
            truth = nvcc_says(case.source, arch, case.flags, tmp_path)
            mine = {
                e.mangled: (e.registers, e.stack_frame, e.spill_stores, e.spill_loads)
                for e in result.entries
                if e.arch == arch
            }
            wanted = truth if not case.entries else {k: v for k, v in truth.items() if k in mine}
            assert mine == wanted, (case.name, arch)
            compared += len(mine)
    assert compared == 2 * 2 + 3 + 2 + 1 + 1


@pytest.mark.slow
def test_spills_differ_by_arch_and_fail_the_cap(report: LintReport) -> None:
    spill = _kernel(report, "spill")
    assert spill.status is KernelStatus.FAILED
    by_arch = {(e.kernel, e.arch): e for e in spill.entries}
    assert by_arch["spill_regs", "sm_90"].constant == {}  # sm_90 prints no cmem: absent, not 0
    assert by_arch["local_array", "sm_80"].local_memory == 1024  # a local array: stack frame, no spills
    assert by_arch["local_array", "sm_80"].shared_memory == 0  # ptxas omits a zero smem field
    messages = [v.message for v in spill.violations]
    assert messages == [
        "spill_regs [sm_80]: spill bytes (460 stored + 752 loaded) = 1212 B exceeds max_spills = 0 B",
        "spill_regs [sm_90]: spill bytes (472 stored + 768 loaded) = 1240 B exceeds max_spills = 0 B",
    ]
    v = spill.violations[0]
    assert (v.kernel, v.arch, v.metric, v.limit, v.value) == ("spill_regs", "sm_80", "spills", 0, 1212)


@pytest.mark.slow
def test_register_cap_fails_the_kernel_with_a_precise_message(report: LintReport) -> None:
    gelu = _kernel(report, "gelu")
    assert gelu.status is KernelStatus.FAILED
    (v,) = gelu.violations
    assert (v.kernel, v.arch, v.metric, v.limit, v.value) == ("gelu", "sm_80", "registers", 8, 12)
    assert v.message == "gelu [sm_80]: registers 12 exceeds max_registers = 8"


def test_forbidden_pattern_fails_and_sass_without_tool_is_not_silent(report: LintReport) -> None:
    matmul = _kernel(report, "matmul")
    assert matmul.status is KernelStatus.FAILED
    errors = [v for v in matmul.violations if v.severity is Severity.ERROR]
    assert [(v.metric, v.limit, v.value, v.unchecked) for v in errors] == [
        ("forbidden_ptx_pattern", r"^bar\.sync", 2, False),
        ("forbidden_sass_pattern", "^BAR", None, True),  # not checked: it fails the kernel too
    ]
    assert errors[0].message == (
        r"matmul_tiled [sm_90]: forbidden ptx pattern '^bar\\.sync' matched 2 instructions, first: bar.sync 0"
    )
    assert "NOT CHECKED" in errors[1].message and "cuobjdump or nvdisasm" in errors[1].message
    assert matmul.warnings == ()
    entry = matmul.entries[0]
    assert entry.sass_instructions is None and entry.ptx_instructions["fma.rn.f32"] == 16
    assert (entry.shared_memory, entry.barriers, entry.constant) == (2048, 1, {})


def test_default_arch_device_functions_and_identity(report: LintReport) -> None:
    noinline = _kernel(report, "noinline")
    assert noinline.status is KernelStatus.PASSED
    assert noinline.arch_source is ArchSource.TOOLCHAIN_DEFAULT and noinline.archs == ("sm_80",)
    listed = subprocess.run(["nvcc", "--list-gpu-code"], capture_output=True, text=True, check=True).stdout
    assert "sm_80" in listed.split()
    k = next(e for e in noinline.entries if e.kernel == "k_noinline")
    assert {d.name: (d.stack_frame, d.spill_stores, d.spill_loads) for d in k.device_functions} == {
        "helper(float, int)": (0, 0, 0),
        "fib(int)": (24, 20, 20),
    }
    found = re.search(
        r"V(\d+\.\d+\.\d+)",
        subprocess.run(["nvcc", "--version"], capture_output=True, text=True, check=True).stdout,
    )
    assert found is not None
    version = found.group(1)
    for kernel in report.kernels:
        for e in kernel.entries:
            assert (e.toolchain.nvcc, e.toolchain.ptxas, e.toolchain.arch) == (version, version, e.arch)
    spill = _kernel(report, "spill").entries[0]
    assert spill.toolchain.flags == ("-maxrregcount=16",)


def test_templ_entries_are_demangled_and_selected(report: LintReport) -> None:
    templ = _kernel(report, "templ")
    assert [e.kernel for e in templ.entries] == [
        "ops::add(float*, float const*)",
        "void scale<float, 4>(float*, float)",
    ]
    assert report.exit_code == ExitCode.GATE_FAILED
    doc = report.to_json()
    assert doc["kernels"][2]["entries"][0]["toolchain"]["arch"] == "sm_80"
    assert doc["kernels"][0]["source"] == "src/spill.cu"


@pytest.mark.slow
def test_ambiguous_overload_entry_is_a_config_error(no_sass_toolchain) -> None:
    with pytest.raises(ConfigError) as info:
        lint_kernels([spec("templ", SRC / "templ.cu", entries=("add",))], toolchain=no_sass_toolchain)
    assert info.value.exit_code == ExitCode.USAGE
    assert "ambiguous" in info.value.message
    assert (
        "add(int*, int const*, int)" in info.value.message
        and "ops::add(float*, float const*)" in info.value.message
    )


def test_syntax_error_points_at_file_and_line(tmp_path: Path, no_sass_toolchain) -> None:
    src = tmp_path / "kernels" / "bad.cu"
    src.parent.mkdir()
    src.write_text('extern "C" __global__ void k(float* p) {\n  int i = threadIdx.x\n  p[i] = 1.f;\n}\n')
    report = lint_kernels([spec("bad", src)], root=tmp_path, toolchain=no_sass_toolchain)
    (bad,) = report.kernels
    assert bad.status is KernelStatus.FAILED and report.exit_code == ExitCode.GATE_FAILED
    assert bad.error is not None
    assert (bad.error.file, bad.error.line, bad.error.message) == ("kernels/bad.cu", 3, 'expected a ";"')
    error = msgspec.to_builtins(bad)["error"]
    assert {k: error[k] for k in ("message", "file", "line", "arch")} == {
        "message": 'expected a ";"',
        "file": "kernels/bad.cu",
        "line": 3,
        "arch": "sm_80",
    }
    assert 'expected a ";"' in error["log"]


@pytest.mark.slow
def test_anonymous_namespace_names_are_the_same_from_any_directory(tmp_path: Path, no_sass_toolchain) -> None:
    names = []
    for sub in ("one", "two/deeper"):
        d = tmp_path / sub
        d.mkdir(parents=True)
        shutil.copy(SRC / "internal.cu", d / "internal.cu")
        report = lint_kernels(
            [spec("internal", d / "internal.cu", flags=("-rdc=true",))], toolchain=no_sass_toolchain
        )
        names.append(sorted((e.kernel, e.mangled) for e in report.kernels[0].entries))
    assert names[0] == names[1]
    assert [n for n, _ in names[0]] == ["(anonymous namespace)::k_anon(float*)", "k_static(float*)"]


def test_ptx_source_goes_straight_to_ptxas(tmp_path: Path, no_sass_toolchain) -> None:
    source = tmp_path / "noinline.ptx"
    shutil.copy(PTX / "noinline.sm80.ptx", source)
    report = lint_kernels([spec("ptx", source, ())], toolchain=no_sass_toolchain)
    (result,) = report.kernels
    assert result.arch_source is ArchSource.PTX_TARGET and result.archs == ("sm_80",)
    proc = subprocess.run(
        ["ptxas", "-v", "-arch=sm_80", "-o", str(tmp_path / "x.cubin"), str(source)],
        capture_output=True,
        text=True,
        check=True,
    )
    regs = dict(
        re.findall(
            r"Compiling entry function '(\w+)'[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*Used (\d+) registers", proc.stderr
        )
    )
    assert {e.kernel: str(e.registers) for e in result.entries} == regs
    assert {e.kernel: sum(e.ptx_instructions.values()) for e in result.entries} == {
        "k_noinline": 18,
        "k_bounds": 9,
        "k_dynsmem": 19,
    }
    assert all(e.toolchain.nvcc is None for e in result.entries)  # nvcc took no part


@pytest.mark.slow
def test_flags_include_dirs_and_defines_reach_the_compiler(tmp_path: Path, no_sass_toolchain) -> None:
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "cfg.h").write_text("#define SCALE 3.0f\n")
    src = tmp_path / "k.cu"
    src.write_text(
        '#include "cfg.h"\n#ifndef WIDTH\n#error WIDTH must be defined\n#endif\n'
        'extern "C" __global__ void k(float* p) { p[threadIdx.x % WIDTH] *= SCALE; }\n'
    )
    ok = lint_kernels(
        [spec("k", src, defines=("WIDTH=4",), include_dirs=(inc,), flags=("-lineinfo",))],
        toolchain=no_sass_toolchain,
    )
    assert ok.kernels[0].status is KernelStatus.PASSED
    assert ok.kernels[0].entries[0].toolchain.flags == ("-lineinfo", "-DWIDTH=4")
    bad = lint_kernels([spec("k", src, include_dirs=(inc,))], root=tmp_path, toolchain=no_sass_toolchain)
    err = bad.kernels[0].error
    assert err is not None and (err.file, err.line) == ("k.cu", 3) and "WIDTH must be defined" in err.message


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"flags": ("-arch=sm_75",)}, "conflicts with how lint compiles"),
        ({"archs": ("sm_70",)}, "arch 'sm_70' is not one this toolchain"),
        ({"archs": ("compute_80",)}, "arch 'compute_80' is a virtual arch; .* such as sm_80"),
    ],
)
def test_specs_lint_cannot_honour_are_config_errors(kwargs: dict, match: str, no_sass_toolchain) -> None:
    with pytest.raises(ConfigError, match=match):
        lint_kernels([spec("gelu", SRC / "gelu.cu", **kwargs)], toolchain=no_sass_toolchain)


def test_compiler_timeout_is_a_toolchain_error_not_a_crash(no_sass_toolchain) -> None:
    report = lint_kernels([spec("spill", SRC / "spill.cu")], toolchain=no_sass_toolchain, timeout=0.05)
    (result,) = report.kernels
    assert result.status is KernelStatus.ERROR and report.exit_code == ExitCode.INFRASTRUCTURE
    assert result.error is not None and "did not finish within the time limit" in result.error.message


def test_missing_nvcc_and_nvrtc_is_an_infrastructure_error(tmp_path: Path) -> None:
    found = discover_toolchain({"PATH": str(tmp_path)})
    toolchain = dataclasses.replace(
        found, nvcc=None, nvrtc=None
    )  # whatever Python packages are installed here
    with pytest.raises(InfraError, match="neither nvcc nor NVRTC was found") as info:
        lint_kernels([spec("gelu", SRC / "gelu.cu")], toolchain=toolchain)
    assert info.value.exit_code == ExitCode.INFRASTRUCTURE


_FOUND = discover_toolchain()


@pytest.mark.slow
@pytest.mark.parametrize("tool", ["nvdisasm", "cuobjdump"])
def test_sass_counts_and_patterns_with_a_real_disassembler(tmp_path: Path, tool: str) -> None:
    """Each SASS tool of NVIDIA's wheels (requirements/dev.lock holds both) on its own reads the SASS that
    patterns are matched against."""
    if getattr(_FOUND, tool) is None:
        pytest.skip(f"no {tool} (pip install nvidia-cuda-{tool})")
    if tool == "nvdisasm":
        toolchain = dataclasses.replace(_FOUND, cuobjdump=None)
    else:
        toolchain = dataclasses.replace(_FOUND, nvdisasm=None)
    assert toolchain.sass_tool == tool
    checks = ArtifactChecks(
        forbidden_patterns=(sass_pattern(r"^MUFU\."),), required_patterns=(sass_pattern(r"^EXIT"),)
    )
    report = lint_kernels([spec("gelu", SRC / "gelu.cu", ("sm_80",), checks=checks)], toolchain=toolchain)
    (gelu,) = report.kernels
    (entry,) = gelu.entries
    assert entry.sass_instructions is not None and "NOP" not in entry.sass_instructions
    path = toolchain.nvdisasm or toolchain.cuobjdump
    assert path is not None
    subprocess.run(
        ["nvcc", "-cubin", "-arch=sm_80", "-o", str(tmp_path / "g.cubin"), str(SRC / "gelu.cu")],
        check=True,
        capture_output=True,
    )
    flag = "-c" if path == toolchain.nvdisasm else "-sass"
    listing = subprocess.run(
        [path, flag, str(tmp_path / "g.cubin")], capture_output=True, text=True, check=True
    )
    mufu = re.findall(r"\bMUFU\.\w+", listing.stdout)
    assert mufu, "tanhf should use the special function unit"
    assert sum(n for op, n in entry.sass_instructions.items() if op.startswith("MUFU.")) == len(mufu)
    (violation,) = gelu.violations
    assert (violation.metric, violation.value, violation.severity) == (
        "forbidden_sass_pattern",
        len(mufu),
        Severity.ERROR,
    )
    assert gelu.status is KernelStatus.FAILED
