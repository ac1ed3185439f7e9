"""NVRTC: the lint's front end where there is no nvcc (the Action's image ships NVIDIA's NVRTC and ptxas wheels,
not the multi-gigabyte CUDA development image).

A `.cu` is compiled to PTX by NVRTC with the kernel's flags translated to NVRTC's, then assembled by the very
`ptxas -v` nvcc would run: registers, spills, stack and shared memory are read from that ptxas, as with nvcc.
NVRTC 13.1 and later address shared memory with 32-bit pointers as nvcc does; NVRTC 12.x and 13.0 use 64-bit
ones, which can cost a register (12 against nvcc's 11 on a shared-memory reduction), so they are not used
(`MIN_VERSION`). The numbers equal nvcc's of the same release for every kernel gpuemu-ci's tests compile
(tests/lint/test_nvrtc_matches_nvcc.py).

NVRTC compiles device code only. A source with host code (main, cudaMalloc, `<<<...>>>`), or one that includes
a host or standard header, cannot be compiled by it: `limitation()` recognises those failures, and lint then
says so for that kernel (status error: the toolchain gave no answer) rather than report numbers from any other
compile. An nvcc flag without a known NVRTC equivalent is refused the same way.

The library is loaded in a separate process (`python -m gpuemu_ci.lint.nvrtc_process`), like every other
compiler: a crash or a hang in it costs that compile, never the run.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

MIN_VERSION = (13, 1)  # the first NVRTC whose PTX addresses shared memory as nvcc's does
_WHEEL_LIB_DIRS = ("cu13/lib", "cuda_nvrtc/lib")
_WHEEL_INCLUDE_DIRS = ("cu13/include", "cu13/include/cccl", "cuda_runtime/include", "cuda_cccl/include")


class NvrtcUnsupported(ValueError):
    """A kernel NVRTC cannot compile as nvcc would (a flag without an equivalent)."""


@dataclass(frozen=True)
class Nvrtc:
    """An NVRTC library found on this machine."""

    library: str  # path of libnvrtc.so.N
    version: str  # "13.5.37" from the wheel, else "13.5" from the library
    includes: tuple[str, ...]  # the CUDA headers beside it (cuda_fp16.h, cub, ...)

    @property
    def release(self) -> tuple[int, int]:
        """The library's (major, minor) version."""
        major, minor = [*self.version.split("."), "0"][:2]
        return int(major), int(minor)


def wheel_roots() -> list[Path]:
    """`.../site-packages/nvidia` of NVIDIA's CUDA wheels (a namespace package: one per site directory)."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    if spec is None or spec.submodule_search_locations is None:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def find_nvrtc(env: Mapping[str, str]) -> Nvrtc | None:
    """NVIDIA's NVRTC wheel (nvidia-cuda-nvrtc), else the CUDA toolkit's under CUDA_HOME; None when neither is
    there or it is older than MIN_VERSION."""
    for root in wheel_roots():
        for sub in _WHEEL_LIB_DIRS:
            found = sorted((root / sub).glob("libnvrtc.so.*"))
            libraries = [p for p in found if ".alt." not in p.name and "builtins" not in p.name]
            if libraries:
                includes = tuple(str(root / d) for d in _WHEEL_INCLUDE_DIRS if (root / d).is_dir())
                version = _wheel_version() or _library_version(libraries[0])
                if version is not None:
                    return _if_recent(Nvrtc(str(libraries[0]), version, includes))
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        home = env.get(variable)
        if home:
            found = sorted(Path(home).glob("lib*/libnvrtc.so.*"))
            libraries = [p for p in found if "builtins" not in p.name and ".alt." not in p.name]
            if libraries:
                version = _library_version(libraries[0])
                include = Path(home) / "include"
                if version is not None:
                    return _if_recent(
                        Nvrtc(str(libraries[0]), version, (str(include), str(include / "cccl")))
                    )
    return None


def _if_recent(nvrtc: Nvrtc) -> Nvrtc | None:
    return nvrtc if nvrtc.release >= MIN_VERSION else None


def _wheel_version() -> str | None:
    for name in ("nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu12"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _library_version(library: Path) -> str | None:
    """`major.minor` asked of the library itself, in a child process (loading it here would pin it)."""
    import subprocess

    try:
        done = subprocess.run(
            [sys.executable, "-m", "gpuemu_ci.lint.nvrtc_process", "--library", str(library), "--version"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


# --- nvcc flags -> NVRTC options and ptxas options -----------------------------------------------------

_SAME = re.compile(
    r"^--?(use_fast_math|use-fast-math|extra-device-vectorization|expt-relaxed-constexpr|"
    r"(ftz|prec-div|prec-sqrt|fmad|prec_div|prec_sqrt)=(true|false))$"
)
_HOST_ONLY = re.compile(r"^-O[0-3s]?$|^-Xcompiler|^--compiler-options|^-ccbin|^--compiler-bindir")


def translate_flags(flags: Sequence[str]) -> tuple[list[str], list[str]]:
    """(NVRTC options, ptxas options) for nvcc `flags`; NvrtcUnsupported for one without an equivalent."""
    nvrtc: list[str] = []
    ptxas: list[str] = []
    items = list(flags)
    i = 0
    while i < len(items):
        flag = items[i]
        following = items[i + 1] if i + 1 < len(items) else None
        if _HOST_ONLY.match(flag):
            # nvcc's -O and -Xcompiler are for the host compiler: the device code does not change.
            i += 2 if flag in ("-Xcompiler", "--compiler-options", "-ccbin", "--compiler-bindir") else 1
            continue
        if _SAME.match(flag):
            nvrtc.append("--" + flag.lstrip("-").replace("_", "-").replace("use-fast-math", "use_fast_math"))
        elif flag in ("-lineinfo", "--generate-line-info"):
            nvrtc.append("--generate-line-info")
        elif flag.startswith(("-std=", "--std=")):
            nvrtc.append("--std=" + flag.split("=", 1)[1])
        elif flag.startswith(("-D", "--define-macro=")) and flag not in ("-D", "--define-macro"):
            nvrtc.append("-D" + flag.removeprefix("--define-macro=").removeprefix("-D"))
        elif flag.startswith(("-I", "--include-path=")) and flag not in ("-I", "--include-path"):
            nvrtc.append("-I" + flag.removeprefix("--include-path=").removeprefix("-I"))
        elif flag.startswith(("-maxrregcount=", "--maxrregcount=")):
            ptxas += ["-maxrregcount", flag.split("=", 1)[1]]  # not carried into PTX: ptxas applies it
        elif flag in ("-maxrregcount", "--maxrregcount") and following is not None:
            ptxas += ["-maxrregcount", following]
            i += 1
        elif flag in ("-Xptxas", "--ptxas-options") and following is not None:
            ptxas += [o for o in following.split(",") if o]
            i += 1
        elif flag.startswith(("-Xptxas=", "--ptxas-options=")):
            ptxas += [o for o in flag.split("=", 1)[1].split(",") if o]
        else:
            raise NvrtcUnsupported(f"the nvcc flag {flag!r} has no NVRTC equivalent that gpuemu-ci knows")
        i += 1
    return nvrtc, ptxas


# --- what NVRTC cannot compile -------------------------------------------------------------------------

_LIMITATIONS = (
    (
        re.compile(r'c(?:ould|an)not open source file "([^"]+)"'),
        "it includes {0}, a header NVRTC does not have",
    ),
    (
        re.compile(r"host functions are not allowed in JIT mode"),
        "it has host code (a function without __device__)",
    ),
    (re.compile(r'identifier "(cuda\w+|main)" is undefined'), "it calls the host API ({0})"),
    (
        re.compile(r"expected an expression[\s\S]*<<<|<<<"),
        "it launches kernels (<<<...>>>), which is host code",
    ),
)


def limitation(log: str) -> str | None:
    """Why NVRTC could not compile a source that nvcc may well compile (host code, host headers), from its
    log; None when the log shows an ordinary compile error."""
    for pattern, words in _LIMITATIONS:
        match = pattern.search(log)
        if match:
            return words.format(*match.groups())
    return None


def command(nvrtc: Nvrtc, source: Path, out: Path, arch: str, options: Sequence[str]) -> list[str]:
    """The child process that compiles `source` to PTX for `arch` (`sm_80` -> NVRTC's `compute_80`)."""
    virtual = "compute_" + arch.split("_", 1)[1]
    includes = [f"-I{d}" for d in nvrtc.includes]
    return [
        sys.executable, "-m", "gpuemu_ci.lint.nvrtc_process", "--library", nvrtc.library, "--out", str(out),
        str(source), "--", f"-arch={virtual}", *options, *includes,
    ]  # fmt: skip


def supported_archs(nvrtc: Nvrtc) -> tuple[str, ...]:
    """The archs this NVRTC can compile for, asked in a separate process (a library that crashes cannot take
    the run down); empty when it cannot say."""
    import subprocess

    try:
        done = subprocess.run(
            [sys.executable, "-m", "gpuemu_ci.lint.nvrtc_process", "--library", nvrtc.library, "--archs"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        archs = json.loads(done.stdout) if done.returncode == 0 else []
    except (OSError, subprocess.SubprocessError, ValueError):
        return ()
    return tuple(a for a in archs if isinstance(a, str))
