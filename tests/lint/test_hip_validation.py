"""What a HIP [[kernels]] entry may not ask of the lint, refused before anything compiles (exit 2): flags that
fight how lint compiles, limits the AMDGPU compiler does not report, archs for the other language."""

from __future__ import annotations

import pytest

from gpuemu_ci.config.model import ArtifactChecks
from gpuemu_ci.errors import ConfigError
from gpuemu_ci.lint import lint_kernels
from gpuemu_ci.lint.hip_compile import HIPCC_INLINING, hipcc_defaults
from gpuemu_ci.lint.hip_toolchain import arch_sort_key, is_amd_arch, pick_default_arch
from gpuemu_ci.lint.run import check_kernels
from tests.lint.support_hip import EXAMPLE, hip_spec
from tests.lint.support_lint import SRC, spec

GELU = EXAMPLE / "kernels" / "gelu.hip"


@pytest.mark.parametrize("key", ["max_spill_stores", "max_spill_loads"])
def test_spill_bytes_cannot_be_checked_for_hip(key: str) -> None:
    checks = (
        ArtifactChecks(max_spill_stores=0) if key == "max_spill_stores" else ArtifactChecks(max_spill_loads=0)
    )
    with pytest.raises(ConfigError, match=f"{key} cannot be checked for a HIP kernel: .* use max_spills"):
        check_kernels([hip_spec("g", GELU, checks=checks)])


@pytest.mark.parametrize(
    ("flag", "why"),
    [
        ("-fgpu-rdc", "with -fgpu-rdc the device code is linked later"),
        ("--offload-arch=gfx942", "set target archs with `archs"),
        ("-o", "set target archs with `archs"),
        ("--cuda-host-only", "set target archs with `archs"),
        ("-emit-llvm", "set target archs with `archs"),
    ],
)
def test_flags_that_fight_the_lint_are_refused(flag: str, why: str) -> None:
    with pytest.raises(ConfigError, match=f"flag {flag!r} conflicts with how lint compiles; {why}"):
        lint_kernels([hip_spec("g", GELU, flags=(flag,))])


def test_an_arch_flag_for_no_selected_kernel_is_refused() -> None:
    with pytest.raises(
        ConfigError, match="--arch sm_90 is an arch for CUDA kernels and no selected kernel is one"
    ):
        check_kernels([hip_spec("g", GELU)], archs=["sm_90"])
    with pytest.raises(ConfigError, match="--arch gfx90a is an arch for HIP kernels"):
        check_kernels([spec("gelu", SRC / "gelu.cu")], archs=["gfx90a"])


def test_hipcc_defaults() -> None:
    assert hipcc_defaults(()) == ("-O3", *HIPCC_INLINING)
    assert hipcc_defaults(("-O2",)) == HIPCC_INLINING
    assert hipcc_defaults(("-O0",)) == ()
    assert hipcc_defaults(("-O0", "-O1")) == HIPCC_INLINING  # the last -O wins, as in clang


def test_arch_names_and_order() -> None:
    assert [is_amd_arch(a) for a in ("gfx90a", "gfx1030", "gfx908:xnack-", "sm_80", "gfx")] == [
        True,
        True,
        True,
        False,
        False,
    ]
    archs = ["gfx1100", "gfx90a", "gfx908", "gfx1030", "gfx940", "gfx906", "gfx803"]
    assert sorted(archs, key=arch_sort_key) == [
        "gfx803",
        "gfx906",
        "gfx908",
        "gfx90a",
        "gfx940",
        "gfx1030",
        "gfx1100",
    ]
    assert pick_default_arch(("gfx908", "gfx90a")) == "gfx90a"
    assert pick_default_arch(("gfx1030", "gfx1100")) == "gfx1030"
    assert pick_default_arch(()) is None
