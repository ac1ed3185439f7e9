"""Real HIP compiles (clang for AMD GPUs, no GPU needed): lint must report exactly what the compiler reports,
as hipcc compiles, and apply its checks to those figures."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuemu_ci.config.model import ArtifactChecks, PatternCheck
from gpuemu_ci.errors import ConfigError, InfraError
from gpuemu_ci.lint import lint_kernels
from gpuemu_ci.lint.hip_toolchain import HipToolchain, discover_hip_toolchain
from gpuemu_ci.results.base import Severity
from gpuemu_ci.results.kernels import ArchSource, KernelStatus
from tests.lint.support_hip import EXAMPLE, HIP_SRC, hip_spec, hip_toolchain, requires_hip
from tests.support_cli import run_cli

pytestmark = [requires_hip, pytest.mark.slow]

_REMARK = re.compile(r"remark: +(?P<name>[A-Za-z ]+?)(?: \[[^\]]+\])?: (?P<value>\S+) \[-Rpass-analysis")
# What each remark is called, and the figure of results.json it must equal.
_REMARK_FIELDS = {
    "VGPRs": "vgprs",
    "AGPRs": "agprs",
    "SGPRs": "sgprs",
    "VGPRs Spill": "vgpr_spills",
    "SGPRs Spill": "sgpr_spills",
    "ScratchSize": "scratch_bytes",
    "LDS Size": "lds_bytes",
    "Occupancy": "occupancy",
}
EXAMPLE_KERNELS = ("gelu", "transpose_lds", "horner_spill")


def remarks_of(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, dict[str, int]]:
    """Run a compile that prints the resource usage remarks; read them with a regex of this test's own."""
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    found: dict[str, dict[str, int]] = {}
    current: dict[str, int] = {}
    for line in proc.stderr.splitlines():
        m = _REMARK.search(line.replace("Function Name", "FunctionName"))
        if "Function Name:" in line:
            current = found.setdefault(line.split("Function Name:", 1)[1].split("[")[0].strip(), {})
        elif m is not None and m.group("name") in _REMARK_FIELDS:
            current[_REMARK_FIELDS[m.group("name")]] = int(m.group("value"))
    return found


@pytest.fixture(scope="module")
def example_lint() -> dict[str, Any]:
    """`gpuemu-ci lint --json` on examples/hip, once."""
    result = run_cli(["lint", "--config", EXAMPLE / "gpuemu.toml", "--json"])
    assert result.code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def _entry(document: dict[str, Any], kernel: str, arch: str) -> dict[str, Any]:
    (k,) = [k for k in document["kernels"] if k["name"] == kernel]
    (e,) = [e for e in k["entries"] if e["arch"] == arch]
    entry: dict[str, Any] = e
    return entry


def test_the_example_reports_what_clang_reports(example_lint: dict[str, Any], tmp_path: Path) -> None:
    """Per kernel and arch, every figure equals the remark clang prints for the same compile (clang run here
    directly, with the flags hipcc would add)."""
    tc = hip_toolchain()
    assert tc.clang is not None
    for name in EXAMPLE_KERNELS:
        for arch in ("gfx90a", "gfx1030"):
            cmd = [
                tc.clang,
                "-x",
                "hip",
                f"--offload-arch={arch}",
                "--cuda-device-only",
                "--no-gpu-bundle-output",
            ]
            cmd += [f"--rocm-path={tc.rocm_path}", f"--hip-device-lib-path={tc.device_libs}", "-O3"]
            cmd += ["-mllvm", "-amdgpu-early-inline-all=true", "-mllvm", "-amdgpu-function-calls=false"]
            cmd += ["-Rpass-analysis=kernel-resource-usage", "-c", str(EXAMPLE / "kernels" / f"{name}.hip")]
            said = remarks_of([*cmd, "-o", str(tmp_path / "k.co")])[name]
            amd = _entry(example_lint, name, arch)["amdgpu"]
            assert {f: amd[f] for f in said} == said, (name, arch)
            assert set(said) >= set(_REMARK_FIELDS.values()) - ({"agprs"} if arch == "gfx1030" else set())


def test_three_kernels_three_kinds_of_pressure(example_lint: dict[str, Any]) -> None:
    for arch in ("gfx90a", "gfx1030"):
        gelu = _entry(example_lint, "gelu", arch)["amdgpu"]
        assert (gelu["lds_bytes"], gelu["scratch_bytes"], gelu["vgpr_spills"], gelu["sgpr_spills"]) == (
            0,
            0,
            0,
            0,
        )
        lds = _entry(example_lint, "transpose_lds", arch)["amdgpu"]
        assert lds["lds_bytes"] == 2 * 64 * 65 * 4 and lds["scratch_bytes"] == 0 and lds["vgpr_spills"] == 0
        assert lds["occupancy"] < gelu["occupancy"]  # the LDS, not the registers, limits it
        assert _entry(example_lint, "transpose_lds", arch)["shared_memory"] == lds["lds_bytes"]
    spill = _entry(example_lint, "horner_spill", "gfx90a")
    # 64 VGPRs: the budget of 8 waves per SIMD (512 / 8); what does not fit went to scratch.
    assert spill["registers"] == spill["amdgpu"]["vgprs"] == 64
    assert spill["amdgpu"]["vgpr_spills"] + spill["amdgpu"]["sgpr_spills"] > 0
    assert spill["amdgpu"]["scratch_bytes"] > 0 and spill["local_memory"] == spill["amdgpu"]["scratch_bytes"]
    assert all(k["status"] == "passed" and k["violations"] == [] for k in example_lint["kernels"])
    assert example_lint["lint"]["toolchain"]["clang"] == hip_toolchain().clang_version
    # The wavefront: 64 lanes on CDNA, 32 on RDNA.
    assert (_entry(example_lint, "gelu", "gfx90a")["amdgpu"]["wavefront_size"], gelu["wavefront_size"]) == (
        64,
        32,
    )


def _hipcc_clang() -> str | None:
    """The clang Debian's hipcc runs (it names its own), or None without hipcc."""
    hipcc = shutil.which("hipcc")
    if hipcc is None:
        return None
    env = {**os.environ, "HIP_PLATFORM": "amd", "HIPCC_VERBOSE": "1"}
    proc = subprocess.run(
        [
            hipcc,
            "--offload-arch=gfx90a",
            "--cuda-device-only",
            "-E",
            "-x",
            "hip",
            "/dev/null",
            "-o",
            "/dev/null",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    m = re.search(r"hipcc-cmd: (\S+)", proc.stdout + proc.stderr)
    return m.group(1) if m else None


def test_lint_compiles_as_hipcc_does(tmp_path: Path) -> None:
    """The same figures as `hipcc` itself (HIP_PLATFORM=amd), with the clang hipcc runs."""
    clang = _hipcc_clang()
    if clang is None:
        pytest.skip("hipcc is not installed (Debian: apt-get install hipcc)")
    tc = discover_hip_toolchain({**os.environ, "HIP_CLANG_PATH": str(Path(clang).resolve().parent)})
    specs = [hip_spec(n, EXAMPLE / "kernels" / f"{n}.hip", ("gfx90a", "gfx1030")) for n in EXAMPLE_KERNELS]
    report = lint_kernels(specs, hip_toolchain=tc)
    env = {**os.environ, "HIP_PLATFORM": "amd"}
    for kernel in report.kernels:
        for e in kernel.entries:
            source = EXAMPLE / "kernels" / f"{kernel.name}.hip"
            cmd = ["hipcc", f"--offload-arch={e.arch}", "--cuda-device-only", "-c", str(source)]
            said = remarks_of(
                [*cmd, "-Rpass-analysis=kernel-resource-usage", "-o", str(tmp_path / "k.co")], env
            )
            assert e.amdgpu is not None
            assert {f: getattr(e.amdgpu, f) for f in said[e.kernel]} == said[e.kernel], (kernel.name, e.arch)
            assert e.toolchain.clang == tc.clang_version


def test_a_register_cap_fails_the_gate() -> None:
    result = run_cli(["lint", "--config", EXAMPLE / "gpuemu-regcap.toml", "--json"])
    assert result.code == 1, result.output
    document = json.loads(result.stdout)
    (kernel,) = document["kernels"]
    vgprs = kernel["entries"][0]["amdgpu"]["vgprs"]
    assert kernel["status"] == "failed" and vgprs > 32
    (violation,) = kernel["violations"]
    assert violation["metric"] == "registers" and (violation["limit"], violation["value"]) == (32, vgprs)
    assert f"horner_spill [gfx90a]: VGPRs {vgprs} exceeds max_registers = 32" in result.stderr


def test_each_limit_is_checked_against_the_compilers_figure() -> None:
    source = EXAMPLE / "kernels" / "horner_spill.hip"
    checks = ArtifactChecks(max_registers=63, max_spills=0, max_local_memory=0, max_shared_memory=0)
    (kernel,) = lint_kernels([hip_spec("h", source, checks=checks)]).kernels
    (e,) = kernel.entries
    assert e.amdgpu is not None
    failed = {v.metric: v for v in kernel.violations}
    assert set(failed) == {"registers", "spills", "local_memory"}
    assert failed["registers"].value == e.amdgpu.vgprs
    assert failed["spills"].value == e.amdgpu.vgpr_spills + e.amdgpu.sgpr_spills  # type: ignore[operator]
    assert f"({e.amdgpu.vgpr_spills} VGPRs + {e.amdgpu.sgpr_spills} SGPRs)" in failed["spills"].message
    assert failed["local_memory"].value == e.amdgpu.scratch_bytes
    assert "scratch per lane" in failed["local_memory"].message
    lds = ArtifactChecks(max_shared_memory=32768)
    (kernel,) = lint_kernels([hip_spec("t", EXAMPLE / "kernels" / "transpose_lds.hip", checks=lds)]).kernels
    (v,) = kernel.violations
    assert (v.metric, v.value, kernel.status) == ("shared_memory", 33280, KernelStatus.FAILED)
    assert "static LDS per workgroup 33280 B exceeds max_shared_memory = 32768 B" in v.message


def test_patterns_against_the_disassembly_and_the_ir() -> None:
    checks = ArtifactChecks(
        required_patterns=(
            PatternCheck("^ds_write", "amdgcn"),
            PatternCheck("^s_barrier$", "amdgcn"),
            PatternCheck(r"call void @llvm\.amdgcn\.s\.barrier", "llvm-ir"),
        ),
        forbidden_patterns=(
            PatternCheck("^scratch_|^buffer_store", "amdgcn"),
            PatternCheck("fdiv", "llvm-ir"),
        ),
    )
    (kernel,) = lint_kernels(
        [hip_spec("t", EXAMPLE / "kernels" / "transpose_lds.hip", checks=checks)]
    ).kernels
    assert kernel.status is KernelStatus.PASSED and kernel.violations == ()
    spill = ArtifactChecks(forbidden_patterns=(PatternCheck("^scratch_store|^buffer_store", "amdgcn"),))
    (kernel,) = lint_kernels([hip_spec("h", EXAMPLE / "kernels" / "horner_spill.hip", checks=spill)]).kernels
    (v,) = kernel.violations
    assert kernel.status is KernelStatus.FAILED and v.metric == "forbidden_amdgcn_pattern"
    assert isinstance(v.value, int) and v.value > 0
    assert re.search(r"matched \d+ instructions?, first: (scratch_store|buffer_store)\w* v\d+", v.message)


def test_an_ir_pattern_sees_the_functions_a_kernel_calls() -> None:
    # At -O0 hipcc adds no inlining options: dot_reversed stays a call, and its body is searched too.
    checks = ArtifactChecks(forbidden_patterns=(PatternCheck(r"= fmul contract float", "llvm-ir"),))
    spec = hip_spec("calls", HIP_SRC / "calls.hip", flags=("-O0",), entries=("private_array",), checks=checks)
    (kernel,) = lint_kernels([spec]).kernels
    (v,) = kernel.violations
    assert "(in dot_reversed(float const*, int))" in v.message


def test_a_pattern_without_its_listing_is_not_checked_and_says_why() -> None:
    """Not checked fails the kernel, unless `[ci] allow_unchecked` makes it a warning; either way it says why."""
    tc = dataclasses.replace(hip_toolchain(), objdump=None)
    checks = ArtifactChecks(forbidden_patterns=(PatternCheck("^scratch_", "amdgcn"),))
    spec = hip_spec("g", EXAMPLE / "kernels" / "gelu.hip", checks=checks)
    for allowed, severity, status in (
        (False, Severity.ERROR, KernelStatus.FAILED),
        (True, Severity.WARNING, KernelStatus.PASSED),
    ):
        (kernel,) = lint_kernels([spec], hip_toolchain=tc, allow_unchecked=allowed).kernels
        (v,) = kernel.violations
        assert v.severity is severity and kernel.status is status
        assert "NOT CHECKED: llvm-objdump was not found beside clang" in v.message
        assert kernel.entries[0].amdgpu is not None and kernel.entries[0].amdgpu.isa_instructions is None


def test_templates_are_demangled_and_selected_by_entries() -> None:
    spec = hip_spec("calls", HIP_SRC / "calls.hip", entries=("scale<float>",))
    (kernel,) = lint_kernels([spec]).kernels
    assert [e.kernel for e in kernel.entries] == ["void scale<float>(float*, float, int)"]
    assert kernel.entries[0].mangled == "_Z5scaleIfEvPT_S0_i"
    (kernel,) = lint_kernels([hip_spec("calls", HIP_SRC / "calls.hip")]).kernels
    assert len(kernel.entries) == 3 and kernel.entries[0].amdgpu is not None
    assert kernel.entry("private_array", "gfx90a").amdgpu.scratch_bytes == 272  # type: ignore[union-attr]


def test_a_compile_error_fails_the_kernel_with_its_location() -> None:
    (kernel,) = lint_kernels([hip_spec("broken", HIP_SRC / "error.hip")]).kernels
    assert kernel.status is KernelStatus.FAILED and kernel.entries == ()
    assert kernel.error is not None
    assert kernel.error.message == "use of undeclared identifier 'undeclared_value'"
    assert (
        kernel.error.line == 5 and kernel.error.file is not None and kernel.error.file.endswith("error.hip")
    )
    assert kernel.error.arch == "gfx90a"


def test_an_arch_the_toolchain_cannot_build_is_a_config_error() -> None:
    tc = hip_toolchain()
    gelu = EXAMPLE / "kernels" / "gelu.hip"
    with pytest.raises(
        ConfigError,
        match=r"arch 'gfx9999' is not one this toolchain can build for: clang .* does "
        r"not know it; it supports: .*gfx90a",
    ):
        lint_kernels([hip_spec("g", gelu, ("gfx9999",))])
    lacking = [a for a in tc.clang_archs if a not in tc.supported_archs]
    if lacking:  # Debian 12: clang 15 knows gfx1100, its device libraries (ROCm 5.2) do not
        with pytest.raises(ConfigError, match=f"have no {lacking[0]} build"):
            lint_kernels([hip_spec("g", gelu, (lacking[0],))])
    with pytest.raises(ConfigError, match="needs a gfx arch"):
        lint_kernels([hip_spec("g", gelu, ("sm_80",))])


def test_the_default_arch_is_recorded_as_a_default() -> None:
    (kernel,) = lint_kernels([hip_spec("g", EXAMPLE / "kernels" / "gelu.hip", ())]).kernels
    assert kernel.archs == ("gfx90a",) and kernel.arch_source is ArchSource.TOOLCHAIN_DEFAULT


def test_no_toolchain_is_an_infrastructure_error() -> None:
    empty = HipToolchain(None, None, None, None, None, None, None)
    with pytest.raises(InfraError, match=r"a clang with the AMDGPU backend.*not found.*apt-get install"):
        lint_kernels([hip_spec("g", EXAMPLE / "kernels" / "gelu.hip")], hip_toolchain=empty)


@pytest.fixture
def no_hip_tools(tmp_path: Path) -> Iterator[dict[str, str | None]]:
    yield {
        "PATH": str(tmp_path),
        "ROCM_PATH": str(tmp_path),
        "HIP_CLANG_PATH": None,
        "HIP_DEVICE_LIB_PATH": None,
    }


def test_the_cli_without_the_toolchain_exits_3(no_hip_tools: dict[str, str | None]) -> None:
    result = run_cli(["lint", "--config", EXAMPLE / "gpuemu.toml"], env=no_hip_tools)
    assert result.code == 3, result.output
    assert "the HIP kernels cannot be linted" in result.stderr and "Traceback" not in result.output
