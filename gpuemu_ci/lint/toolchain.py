"""Find the CUDA tools (nvcc or NVRTC, ptxas, nvdisasm, cuobjdump, c++filt), their versions and the default arch.

Search order for each tool: PATH, then `$CUDA_HOME/bin` / `$CUDA_PATH/bin`, then the directory of the nvcc
found, then the `nvidia/cu13/bin` directory of NVIDIA's pip wheels (`nvidia-cuda-nvdisasm`, ...).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpuemu_ci.errors import ConfigError
from gpuemu_ci.lint.model import Toolchain
from gpuemu_ci.lint.nvrtc import find_nvrtc, wheel_roots
from gpuemu_ci.lint.nvrtc import supported_archs as nvrtc_archs
from gpuemu_ci.lint.tools import output_of

_RELEASE = re.compile(r"release (?P<maj>\d+)\.(?P<min>\d+), V(?P<full>[\d.]+)")
_BUILD = re.compile(r"^Build (?P<build>\S+)", re.MULTILINE)
_ARCH = re.compile(r"^sm_(?P<num>\d+)(?P<suffix>[a-z]?)$")

PREFERRED_DEFAULT_ARCH = "sm_80"  # Ampere: the oldest arch every current datacenter toolkit still targets


def _wheel_bin_dirs() -> list[Path]:
    """`.../site-packages/nvidia/cu13/bin` (and friends) of NVIDIA's CUDA wheels, when installed."""
    dirs: list[Path] = []
    for base in wheel_roots():
        for sub in ("cu13", "cu12", "cuda_nvcc", "cuda_cuobjdump", "cuda_nvdisasm"):
            candidate = base / sub / "bin"
            if candidate.is_dir():
                dirs.append(candidate)
    return dirs


def find_tool(name: str, env: Mapping[str, str], extra_dirs: Sequence[Path] = ()) -> str | None:
    """Absolute path of an executable `name`, or None."""
    found = shutil.which(name, path=env.get("PATH", ""))
    if found:
        return found
    dirs = [Path(env[v]) / "bin" for v in ("CUDA_HOME", "CUDA_PATH") if env.get(v)]
    for d in [*dirs, *extra_dirs]:
        candidate = d / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def tool_version(path: str | None, env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """("13.0.88", "cuda_13.0.r13.0/compiler.36424714_0") from `TOOL --version`, or (None, None)."""
    if path is None:
        return None, None
    out = output_of([path, "--version"], env)
    if out is None:
        return None, None
    rel, build = _RELEASE.search(out), _BUILD.search(out)
    return (rel.group("full") if rel else None), (build.group("build") if build else None)


def arch_key(arch: str) -> tuple[int, str]:
    """A sort key that orders archs by number, then suffix (`sm_80` < `sm_90` < `sm_90a` < `sm_100`); an
    unrecognised name sorts first."""
    m = _ARCH.match(arch)
    return (int(m.group("num")), m.group("suffix")) if m else (0, arch)


def supported_archs(nvcc: str | None, env: Mapping[str, str]) -> tuple[str, ...]:
    """The real archs nvcc can build for (`nvcc --list-gpu-code`), lowest first; empty when unknown."""
    if nvcc is None:
        return ()
    out = output_of([nvcc, "--list-gpu-code"], env)
    if out is None:
        return ()
    archs = {tok for tok in out.split() if _ARCH.match(tok)}
    return tuple(sorted(archs, key=arch_key))


def pick_default_arch(supported: Sequence[str]) -> str:
    """sm_80 when the toolchain supports it, else the lowest arch it supports (older toolkits: sm_80 too)."""
    if not supported or PREFERRED_DEFAULT_ARCH in supported:
        return PREFERRED_DEFAULT_ARCH
    return sorted(supported, key=arch_key)[0]


def arch_supported(arch: str, supported: Sequence[str]) -> bool:
    """True when nvcc lists the arch; `sm_90a`/`sm_100f` count as supported when their base is listed."""
    if not supported:
        return _ARCH.match(arch) is not None
    m = _ARCH.match(arch)
    return m is not None and (arch in supported or f"sm_{m.group('num')}" in supported)


FRONTEND_VARIABLE = "GPUEMU_LINT_FRONTEND"  # "nvcc" or "nvrtc": which compiles .cu sources when both exist
# "nvdisasm", "cuobjdump" or "none": which SASS tool lint may use (none: lint as a machine without one does)
SASS_TOOL_VARIABLE = "GPUEMU_SASS_TOOL"
SASS_TOOL_CHOICES = ("nvdisasm", "cuobjdump", "none")


def nvcc_usable(nvcc: str, env: Mapping[str, str]) -> bool:
    """Whether `nvcc` can compile at all: its front end (cicc, where nvcc.profile puts it) is installed, and
    so is the host compiler it preprocesses with. NVIDIA's nvcc wheel ships nvcc without either."""
    bin_dir = Path(nvcc).resolve().parent
    host = shutil.which("g++", path=env.get("PATH", "")) or shutil.which("gcc", path=env.get("PATH", ""))
    if (bin_dir / "nvcc.profile").is_file():  # a real nvcc (not a wrapper script): its tree must be complete
        return (bin_dir.parent / "nvvm" / "bin" / "cicc").is_file() and host is not None
    return host is not None


def discover_toolchain(env: Mapping[str, str] | None = None) -> Toolchain:
    """Look for every tool and ask the compilers their versions. Missing tools are None; only a
    GPUEMU_SASS_TOOL that names no SASS tool raises (ConfigError).

    A .cu source is compiled by nvcc when a usable one is found, else by NVRTC and ptxas (`lint.nvrtc`);
    GPUEMU_LINT_FRONTEND=nvrtc asks for NVRTC even beside nvcc (to lint locally as the Action's image does)."""
    env = dict(os.environ if env is None else env)
    wheel_dirs = _wheel_bin_dirs()
    nvcc = find_tool("nvcc", env, wheel_dirs)
    if nvcc is not None and (env.get(FRONTEND_VARIABLE) == "nvrtc" or not nvcc_usable(nvcc, env)):
        nvcc_bin = Path(nvcc).resolve().parent
        nvcc = None
        wheel_dirs = [nvcc_bin, *wheel_dirs]  # its ptxas is still the one to use
    near = [Path(nvcc).resolve().parent] if nvcc else []
    extra = [*near, *wheel_dirs]
    # nvcc runs the ptxas beside it, so that one is the ptxas whose version the records must carry.
    beside = near[0] / "ptxas" if near else None
    ptxas = str(beside) if beside is not None and beside.is_file() else find_tool("ptxas", env, extra)
    nvrtc = find_nvrtc(env) if nvcc is None else None  # nvcc, when present, stays the front end
    if nvrtc is not None:
        # NVRTC's PTX needs the ptxas of its own release (an older one refuses a newer PTX ISA).
        beside_nvrtc = Path(nvrtc.library).parent.parent / "bin" / "ptxas"
        if beside_nvrtc.is_file():
            ptxas = str(beside_nvrtc)
            extra = [beside_nvrtc.parent, *extra]
    choice = env.get(SASS_TOOL_VARIABLE) or None
    if choice is not None and choice not in SASS_TOOL_CHOICES:
        raise ConfigError(f"{SASS_TOOL_VARIABLE}={choice!r}: expected one of {', '.join(SASS_TOOL_CHOICES)}")
    nvdisasm = find_tool("nvdisasm", env, extra) if choice in (None, "nvdisasm") else None
    cuobjdump = find_tool("cuobjdump", env, extra) if choice in (None, "cuobjdump") else None
    cxxfilt = find_tool("c++filt", env)
    nvcc_version, nvcc_build = tool_version(nvcc, env)
    ptxas_version, _ = tool_version(ptxas, env)
    sass_version, _ = tool_version(nvdisasm or cuobjdump, env)
    archs = supported_archs(nvcc, env)
    if nvrtc is not None and not archs:
        archs = tuple(sorted(nvrtc_archs(nvrtc), key=arch_key))
    return Toolchain(
        nvcc=nvcc,
        ptxas=ptxas,
        cuobjdump=cuobjdump,
        nvdisasm=nvdisasm,
        cxxfilt=cxxfilt,
        nvcc_version=nvcc_version,
        ptxas_version=ptxas_version,
        nvcc_build=nvcc_build,
        sass_tool_version=sass_version,
        supported_archs=archs,
        default_arch=pick_default_arch(archs) if (nvcc or ptxas) else None,
        nvrtc=nvrtc,
    )
