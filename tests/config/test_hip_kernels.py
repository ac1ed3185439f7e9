"""[[kernels]] written in HIP: the language (from the suffix or `language`), gfx archs, pattern targets, and a
launch that needs an AMD GPU. Every mistake is a config error (exit 2) naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuemu_ci.config.load import load_config
from gpuemu_ci.config.model import KernelLanguage
from gpuemu_ci.errors import ConfigError, ExitCode

SOURCES = {"k.hip": "__global__ void k() {}\n", "k.cu": "__global__ void k() {}\n", "k.ptx": ".version 8.0\n"}


def _kernel(make_project, body: str, source: str = "k.hip"):
    text = f'[[kernels]]\nname = "k"\nsource = "{source}"\n{body}\n'
    return load_config(make_project(text, SOURCES)).kernels[0]


def _error(make_project, body: str, source: str = "k.hip") -> ConfigError:
    with pytest.raises(ConfigError) as info:
        _kernel(make_project, body, source)
    assert info.value.exit_code is ExitCode.USAGE
    return info.value


def test_the_language_comes_from_the_suffix_or_the_key(make_project) -> None:
    assert _kernel(make_project, "").language is KernelLanguage.HIP
    assert _kernel(make_project, "", "k.cu").language is KernelLanguage.CUDA
    assert _kernel(make_project, 'language = "hip"', "k.cu").language is KernelLanguage.HIP
    assert _kernel(make_project, 'language = "cuda"', "k.hip").language is KernelLanguage.CUDA


def test_a_bad_language_is_refused(make_project) -> None:
    assert "unknown value 'hipp' (did you mean `hip`?)" in _error(make_project, 'language = "hipp"').message
    error = _error(make_project, 'language = "hip"', "k.ptx")
    assert (
        "k.ptx is PTX, which only CUDA kernels have" in error.message
        and "`kernels[0].language`" in error.message
    )


@pytest.mark.parametrize("arch", ["gfx90a", "gfx942", "gfx1100", "gfx908:sramecc+:xnack-", "gfx90a:xnack+"])
def test_hip_kernels_take_gfx_archs(make_project, arch: str) -> None:
    assert _kernel(make_project, f'archs = ["{arch}"]').archs == (arch,)


@pytest.mark.parametrize(
    ("archs", "source", "message"),
    [
        ('["sm_80"]', "k.hip", "is not an AMD GPU arch like"),
        ('["gfx90a:fast+"]', "k.hip", "is not an AMD GPU arch like"),
        ('["GFX90A"]', "k.hip", "is not an AMD GPU arch like"),
        ('["gfx90a"]', "k.cu", '"sm_90a" (an AMD GPU arch: a HIP kernel is a .hip source'),
    ],
)
def test_an_arch_of_the_other_language_is_refused(
    make_project, archs: str, source: str, message: str
) -> None:
    error = _error(make_project, f"archs = {archs}", source)
    assert message in error.message and "`kernels[0].archs`" in error.message


def test_a_plain_pattern_of_a_hip_kernel_matches_its_disassembly(make_project) -> None:
    body = '[kernels.artifact_checks]\nforbidden_patterns = ["^scratch_", { pattern = "fdiv", target = "llvm-ir" }]'
    checks = _kernel(make_project, body).artifact_checks
    written = [(c.pattern, c.target) for c in checks.forbidden_patterns]
    assert written == [("^scratch_", "amdgcn"), ("fdiv", "llvm-ir")]
    assert _kernel(make_project, body.replace("llvm-ir", "ptx").replace("fdiv", "x"), "k.cu") is not None


@pytest.mark.parametrize(
    ("target", "source", "message"),
    [
        (
            "sass",
            "k.hip",
            "target must be \"amdgcn\" or \"llvm-ir\", got 'sass' ('sass' is for CUDA kernels)",
        ),
        ("ptx", "k.hip", "('ptx' is for CUDA kernels)"),
        ("amdgcn", "k.cu", "target must be \"ptx\" or \"sass\", got 'amdgcn' ('amdgcn' is for HIP kernels)"),
        ("isa", "k.hip", 'target must be "amdgcn" or "llvm-ir", got \'isa\''),
    ],
)
def test_a_pattern_target_the_language_has_not_is_refused(
    make_project, target: str, source: str, message: str
) -> None:
    body = f'[kernels.artifact_checks]\nrequired_patterns = [{{ pattern = "x", target = "{target}" }}]'
    error = _error(make_project, body, source)
    assert message in error.message


def test_a_hip_launch_needs_an_amd_gpu(make_project, tmp_path: Path) -> None:
    text = """
    [[kernels]]
    name = "k"
    source = "k.hip"
    reference = "m.ref:f"
    family = "elementwise"
    [kernels.dims]
    N = [8]
    [kernels.inputs]
    x = ["N"]
    [kernels.launch]
    kernel = "k"
    grid = [1]
    block = [32]
    args = ["x", "out", "N"]
    output = ["N"]
    """
    files = {**SOURCES, "m/__init__.py": "", "m/ref.py": "def f(x):\n    return x\n"}
    config = load_config(make_project(text, files))
    (op,) = config.kernel_ops
    assert op.execution.amd_gpu and op.execution.require_gpu
    cuda = load_config(make_project(text.replace("k.hip", "k.cu"), files))
    assert not cuda.kernel_ops[0].execution.amd_gpu and cuda.kernel_ops[0].execution.require_gpu
