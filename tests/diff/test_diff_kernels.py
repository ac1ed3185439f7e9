"""Kernel regressions between real `gpuemu-ci run`s that compile [[kernels]] with the real nvcc/ptxas:
more register pressure, changed flags, a new arch, added and removed kernels, a compile error."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuemu_ci.config.model import KernelDeltaOverride, Policies
from gpuemu_ci.diff.baseline import load_baseline
from gpuemu_ci.diff.classify import baseline_info, compare
from tests.diff.support_diff import (
    PTX_SRC,
    diff_cli,
    entry,
    gpuemu,
    kernel_entry,
    load,
    reason,
    requires_nvcc,
    save,
    valid_diff,
    valid_results,
)

pytestmark = [pytest.mark.slow, requires_nvcc]

# The fixture's gelu, 16 elements per thread kept live in registers: same math, more registers.
GELU_WIDE = """
extern "C" __global__ void gelu(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = (blockIdx.x * blockDim.x + threadIdx.x) * 16;
    float v[16];
    #pragma unroll
    for (int k = 0; k < 16; ++k) v[k] = (i + k < n) ? x[i + k] : 0.0f;
    #pragma unroll
    for (int k = 0; k < 16; ++k) {
        float t = v[k];
        v[k] = 0.5f * t * (1.0f + tanhf(0.7978845608f * (t + 0.044715f * t * t * t)));
    }
    #pragma unroll
    for (int k = 0; k < 16; ++k) if (i + k < n) y[i + k] = v[k];
}
"""

BASE_CONFIG = """
[project]
name = "kernels"

[[kernels]]
name = "gelu"
source = "k/gelu.cu"
archs = ["sm_80"]

[[kernels]]
name = "spill"
source = "k/spill.cu"
archs = ["sm_80"]

[[kernels]]
name = "matmul"
source = "k/matmul.cu"
archs = ["sm_80"]
"""

# gelu: more registers and a new arch; spill: new flags (a toolchain change); matmul removed; gelu2 new.
CURRENT_CONFIG = """
[project]
name = "kernels"

[[kernels]]
name = "gelu"
source = "k/gelu_wide.cu"
archs = ["sm_80", "sm_90"]

[[kernels]]
name = "spill"
source = "k/spill.cu"
archs = ["sm_80"]
flags = ["-maxrregcount=24"]

[[kernels]]
name = "gelu2"
source = "k/gelu.cu"
archs = ["sm_80"]
"""

# gelu does not compile any more; spill now breaks a register cap it used to meet (no cap before).
BROKEN_CONFIG = """
[project]
name = "kernels"

[[kernels]]
name = "gelu"
source = "k/broken.cu"
archs = ["sm_80"]

[[kernels]]
name = "spill"
source = "k/spill.cu"
archs = ["sm_80"]
[kernels.artifact_checks]
max_registers = 8
"""


@dataclass(frozen=True)
class Runs:
    root: Path
    base: Path
    current: Path
    current_exit: int
    current_stderr: str
    broken: Path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    root = tmp_path_factory.mktemp("kernels")
    (root / "k").mkdir()
    for name in ("gelu.cu", "spill.cu", "matmul.cu"):
        shutil.copy(PTX_SRC / name, root / "k" / name)
    (root / "k" / "gelu_wide.cu").write_text(GELU_WIDE)
    (root / "k" / "broken.cu").write_text('extern "C" __global__ void gelu(float* y) {\n  y[0] = oops;\n}\n')
    for name, text in (
        ("base.toml", BASE_CONFIG),
        ("current.toml", CURRENT_CONFIG),
        ("broken.toml", BROKEN_CONFIG),
    ):
        (root / name).write_text(text)
    done = gpuemu("run", "--config", "base.toml", "--out", "base", cwd=root)
    assert done.returncode == 0, done.stderr
    current = gpuemu(
        "run", "--config", "current.toml", "--out", "current", "--baseline", "base/results.json", cwd=root
    )
    broken = gpuemu("run", "--config", "broken.toml", "--out", "broken", cwd=root)
    assert broken.returncode == 1, broken.stderr
    return Runs(
        root,
        root / "base" / "results.json",
        root / "current" / "results.json",
        current.returncode,
        current.stderr,
        root / "broken" / "results.json",
    )


def test_more_registers_is_a_failing_regression_with_old_and_new(runs: Runs) -> None:
    code, diff, stderr = diff_cli(runs.base, runs.current)
    assert code == 1
    e = entry(diff, "gelu", "sm_80")
    assert (e["classification"], e["severity"]) == ("regressed", "error")
    registers = reason(e, "registers")
    assert registers["old"] == kernel_entry(load(runs.base), "gelu", "gelu", "sm_80")["registers"]
    assert registers["new"] == kernel_entry(load(runs.current), "gelu", "gelu", "sm_80")["registers"]
    assert registers["new"] > registers["old"]
    assert "more than max_register_increase = 8" in registers["message"]  # the default allows one block
    assert "gelu [sm_80]" in stderr and f"registers {registers['old']} -> {registers['new']}" in stderr


def test_run_with_baseline_fails_the_gate_although_the_run_itself_passed(runs: Runs) -> None:
    assert runs.current_exit == 1
    document = load(runs.current)
    assert all(k["status"] == "passed" for k in document["kernels"])  # no absolute check failed
    assert document["verdict"] == "failed" and document["exit_code"] == 1
    assert document["diff"]["gate_failed"] is True
    assert any("regression" in note for note in document["notes"])
    assert "1 regression" in runs.current_stderr


def test_policy_deltas_from_the_config_allow_the_increase(runs: Runs) -> None:
    growth = (
        kernel_entry(load(runs.current), "gelu", "gelu", "sm_80")["registers"]
        - kernel_entry(load(runs.base), "gelu", "gelu", "sm_80")["registers"]
    )
    config = runs.root / "lenient.toml"
    config.write_text(
        CURRENT_CONFIG + f"\n[policies]\nmax_register_increase = {growth}\n"
        "max_instruction_increase_pct = 100000\n"
    )
    code, diff, _ = diff_cli(runs.base, runs.current, "--config", config)
    assert code == 0
    e = entry(diff, "gelu", "sm_80")
    assert e["classification"] == "unchanged"
    assert f"within max_register_increase = {growth}" in reason(e, "registers")["message"]


def test_per_kernel_overrides_apply_to_that_kernel_only(runs: Runs) -> None:
    base, current = load_baseline(runs.base), load_baseline(runs.current)

    def diff(policies: Policies):
        return compare(base, current, policies, fail_on_regression=True, info=baseline_info(base, "base"))

    loose = KernelDeltaOverride(max_register_increase=1000, max_instruction_increase_pct=1e6)
    gelu = next(
        e for e in diff(Policies(kernel_overrides=(("gelu", loose),))).entries if e.label == "gelu [sm_80]"
    )
    assert gelu.classification.value == "unchanged"
    assert any("[policies.kernels.gelu]" in r.message for r in gelu.reasons)
    other = Policies(kernel_overrides=(("other", KernelDeltaOverride(max_register_increase=1000)),))
    strict = next(e for e in diff(other).entries if e.label == "gelu [sm_80]")
    assert strict.classification.value == "regressed"


def test_changed_flags_are_a_toolchain_change_not_a_regression(runs: Runs) -> None:
    _, diff, _ = diff_cli(runs.base, runs.current)
    for kernel in ("spill/spill_regs", "spill/local_array"):
        e = entry(diff, kernel, "sm_80")
        assert (e["classification"], e["severity"]) == ("toolchain_changed", "info")
        flags = reason(e, "toolchain.flags")
        assert (flags["old"], flags["new"]) == ("", "-maxrregcount=24")


def test_an_edited_toolchain_version_is_shown_and_does_not_fail(runs: Runs) -> None:
    baseline = load(runs.base)
    for kernel in baseline["kernels"]:
        for e in kernel["entries"]:
            e["toolchain"]["nvcc"] = e["toolchain"]["ptxas"] = "12.4.131"
    path = save(runs.root / "old-nvcc.json", baseline)
    code, diff, stderr = diff_cli(path, runs.current)
    assert code == 0 and diff["regressions"] == 0
    e = entry(diff, "gelu", "sm_80")
    assert (e["classification"], e["severity"]) == ("toolchain_changed", "info")
    assert reason(e, "toolchain.nvcc")["old"] == "12.4.131"
    assert "not counted: the toolchain changed" in reason(e, "registers")["message"]
    assert "toolchain_changed" in stderr


def test_new_and_removed_kernels_and_archs_are_listed(runs: Runs) -> None:
    _, diff, stderr = diff_cli(runs.base, runs.current)
    assert entry(diff, "gelu", "sm_90")["classification"] == "new"
    assert entry(diff, "gelu2/gelu", "sm_80")["classification"] == "new"
    removed = entry(diff, "matmul/matmul_tiled", "sm_80")
    assert (removed["classification"], removed["severity"]) == ("removed", "warning")
    assert removed["config_name"] == "matmul" and removed["entry"] == "matmul_tiled"
    assert "matmul/matmul_tiled [sm_80]" in stderr and "gelu [sm_90]" in stderr


def test_a_kernel_that_no_longer_compiles_is_a_regression(runs: Runs) -> None:
    code, diff, _ = diff_cli(runs.base, runs.broken)
    assert code == 1
    e = entry(diff, "gelu", "sm_80")
    assert (e["classification"], e["severity"]) == ("regressed", "error")
    assert "no longer compiles" in reason(e, "status")["message"] and "oops" in reason(e, "status")["message"]


def test_a_check_that_now_fails_is_a_regression(runs: Runs) -> None:
    _, diff, _ = diff_cli(runs.base, runs.broken)
    e = entry(diff, "spill/spill_regs", "sm_80")
    assert e["classification"] == "regressed"
    lint = reason(e, "lint")
    assert (lint["old"], lint["new"]) == ("passed", "failed") and "max_registers" in lint["message"]


def test_a_new_kernel_that_does_not_compile_is_listed_per_configured_arch(runs: Runs) -> None:
    baseline = load(runs.base)
    baseline["kernels"] = [k for k in baseline["kernels"] if k["name"] != "gelu"]
    code, diff, _ = diff_cli(save(runs.root / "no-gelu.json", baseline), runs.broken)
    e = entry(diff, "gelu", "sm_80")
    assert (e["classification"], e["severity"]) == ("new", "info")
    assert "oops" in reason(e, "status")["message"]
    assert code == 1  # spill's newly failing register cap is still a regression


def test_results_with_a_diff_match_the_results_schema(runs: Runs) -> None:
    valid_results(load(runs.current))
    valid_diff(load(runs.current)["diff"])
