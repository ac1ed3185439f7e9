"""Find the tools that lint HIP kernels for AMD GPUs: a clang with the AMDGPU backend, the ROCm device libraries
(the bitcode of the math and runtime functions HIP code calls), the HIP headers, and llvm-objdump / llvm-readelf
to read the code objects. No GPU is needed: clang compiles for any gfx arch it knows.

Search order for clang: `$HIP_CLANG_PATH` (hipcc's own variable: the directory of clang), `$ROCM_PATH/llvm/bin`
and `$ROCM_PATH/lib/llvm/bin`, `/opt/rocm/...`, then `clang++` and the versioned `clang++-N` of Linux
distributions (newest first) on PATH. llvm-objdump and llvm-readelf are taken from beside that clang, so that
all three are one LLVM release. Device libraries: `$HIP_DEVICE_LIB_PATH`, the ROCm layouts, Debian's
`/usr/lib/<multiarch>/amdgcn/bitcode`, and clang's resource directory.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuemu_ci.lint.tools import output_of

PREFERRED_DEFAULT_ARCH = (
    "gfx90a"  # CDNA2 (MI200): the datacenter arch every ROCm release of the last years builds
)
ROCM_DEFAULT = "/opt/rocm"
_CLANG_VERSION = re.compile(r"clang version (?P<version>\d+\.\d+\.\d+)")
_HIP_VERSION = re.compile(
    r"^#define\s+HIP_VERSION_(?P<part>MAJOR|MINOR|PATCH)\s+(?P<value>\d+)", re.MULTILINE
)
_GFX = re.compile(r"^gfx[0-9]+[0-9a-f]*$")
_ISA_FILE = re.compile(r"^oclc_isa_version_(?P<suffix>[0-9a-f]+)\.bc$")
_BITCODE_IDENT = re.compile(rb"clang version (\d+\.\d+\.\d+)")
_VERSIONED_CLANG = range(30, 13, -1)  # clang++-30 .. clang++-14 (14 is the first with the remarks lint reads)


@dataclass(frozen=True)
class HipToolchain:
    """The HIP tools found on this machine. Paths are never written into results; versions are."""

    clang: str | None  # clang++ with the AMDGPU backend
    clang_version: str | None  # "15.0.6"
    rocm_path: str | None  # the directory with include/hip/hip_runtime.h (clang's --rocm-path)
    hip_version: str | None  # "5.2.21153", from hip/hip_version.h
    device_libs: str | None  # the directory of ocml.bc, oclc_isa_version_<gfx>.bc, ...
    objdump: str | None  # llvm-objdump, for the disassembly
    readelf: str | None  # llvm-readelf, for the code object's metadata notes and symbol sizes
    clang_archs: tuple[str, ...] = ()  # gfx targets clang knows
    library_archs: tuple[str, ...] | None = None  # gfx targets of the device libraries (None: any)
    device_libs_clang: str | None = None  # the clang release that built the device libraries ("15.0.5")

    @property
    def mismatch(self) -> str | None:
        """Why the figures may not be those of a matched toolchain: the device libraries are built for one LLVM
        major release, and this clang is another (None when they match or one is unknown)."""
        ours, theirs = self.clang_version, self.device_libs_clang
        if ours and theirs and ours.split(".")[0] != theirs.split(".")[0]:
            return (
                f"clang {ours} uses device libraries built by clang {theirs}: bitcode is only guaranteed to work "
                f"within one LLVM major release (set HIP_CLANG_PATH to a clang {theirs.split('.')[0]})"
            )
        return None

    @property
    def supported_archs(self) -> tuple[str, ...]:
        """The gfx archs a HIP source can be compiled for here: known to clang and to the device libraries."""
        if self.library_archs is None:
            return self.clang_archs
        return tuple(a for a in self.clang_archs if a in self.library_archs)

    @property
    def default_arch(self) -> str | None:
        """The arch the lint compiles for when none is configured, or None without a clang."""
        return pick_default_arch(self.supported_archs) if self.clang else None

    @property
    def missing(self) -> tuple[str, ...]:
        """What a HIP compile needs and is not here, in words (empty: everything was found)."""
        needs = (
            (self.clang, "a clang with the AMDGPU backend"),
            (self.device_libs, "the ROCm device libraries (amdgcn bitcode)"),
            (self.rocm_path, "the HIP headers (hip/hip_runtime.h)"),
            (self.readelf, "llvm-readelf (beside clang)"),
        )
        return tuple(words for found, words in needs if not found)


def pick_default_arch(supported: Sequence[str]) -> str | None:
    """gfx90a when it is supported, else the first supported arch (None when there is none)."""
    if PREFERRED_DEFAULT_ARCH in supported:
        return PREFERRED_DEFAULT_ARCH
    return supported[0] if supported else None


def arch_processor(arch: str) -> str:
    """ "gfx90a" of a target ID such as "gfx90a:xnack+" (the processor before any feature)."""
    return arch.split(":", 1)[0]


def is_amd_arch(arch: str) -> bool:
    """Whether `arch` names an AMD GPU (`gfx90a`, `gfx942:xnack-`), as opposed to an NVIDIA one."""
    return _GFX.match(arch_processor(arch)) is not None


def _executable(path: Path) -> str | None:
    return str(path) if path.is_file() and os.access(path, os.X_OK) else None


def _rocm_roots(env: Mapping[str, str]) -> list[Path]:
    roots = [env[v] for v in ("ROCM_PATH", "HIP_PATH") if env.get(v)]
    return [Path(r) for r in dict.fromkeys([*roots, ROCM_DEFAULT])]


def _clang_candidates(env: Mapping[str, str]) -> list[str]:
    found: list[str] = []
    dirs = [Path(env["HIP_CLANG_PATH"])] if env.get("HIP_CLANG_PATH") else []
    for root in _rocm_roots(env):
        dirs += [root / "llvm" / "bin", root / "lib" / "llvm" / "bin"]
    for d in dirs:
        exe = _executable(d / "clang++")
        if exe:
            found.append(exe)
    path = env.get("PATH", "")
    for name in ["clang++", *(f"clang++-{n}" for n in _VERSIONED_CLANG)]:
        exe = shutil.which(name, path=path)
        if exe:
            found.append(exe)
    return list(dict.fromkeys(found))


def clang_archs(clang: str, env: Mapping[str, str]) -> tuple[str, ...]:
    """The gfx processors clang can generate code for (`--print-supported-cpus` for amdgcn)."""
    out = output_of([clang, "--target=amdgcn-amd-amdhsa", "-nogpulib", "--print-supported-cpus"], env)
    if out is None:
        return ()
    return tuple(sorted({tok for tok in out.split() if _GFX.match(tok)}, key=arch_sort_key))


def arch_sort_key(arch: str) -> tuple[int, str]:
    """gfx906 < gfx908 < gfx90a < gfx940 < gfx1030 < gfx1100: generation first, then stepping."""
    digits = arch_processor(arch)[3:]
    generation = int(digits[:-2]) if len(digits) > 2 and digits[:-2].isdigit() else 0
    return generation, digits[-2:]


@dataclass(frozen=True)
class _Clang:
    path: str
    version: str | None
    archs: tuple[str, ...]

    @property
    def major(self) -> str | None:
        return self.version.split(".", 1)[0] if self.version else None


def _clangs(env: Mapping[str, str]) -> list[_Clang]:
    """Every candidate clang that knows a gfx arch, in search order."""
    found = []
    for clang in _clang_candidates(env):
        archs = clang_archs(clang, env)
        if archs:
            m = _CLANG_VERSION.search(output_of([clang, "--version"], env) or "")
            found.append(_Clang(clang, m.group("version") if m else None, archs))
    return found


def _device_lib_candidates(env: Mapping[str, str], clangs: Sequence[_Clang]) -> list[Path]:
    out: list[Path] = []
    if env.get("HIP_DEVICE_LIB_PATH"):
        out.append(Path(env["HIP_DEVICE_LIB_PATH"]))
    patterns: list[str] = []
    for root in _rocm_roots(env):
        patterns += [f"{root}/amdgcn/bitcode", f"{root}/lib/llvm/lib/clang/*/lib/amdgcn/bitcode"]
    for clang in clangs:  # libraries built for one LLVM release live in its resource directory
        llvm_root = Path(clang.path).resolve().parent.parent
        patterns += [f"{llvm_root}/lib/clang/*/lib/amdgcn/bitcode", f"{llvm_root}/lib/clang/*/amdgcn/bitcode"]
        patterns.append(f"{llvm_root}/amdgcn/bitcode")
    patterns += ["/usr/lib/*/amdgcn/bitcode", "/usr/lib/amdgcn/bitcode"]  # Debian 12's rocm-device-libs
    for pattern in patterns:
        out += [Path(p) for p in sorted(glob.glob(pattern))]
    return out


def _find_device_libs(env: Mapping[str, str], clangs: Sequence[_Clang]) -> Path | None:
    for d in _device_lib_candidates(env, clangs):
        if (d / "ocml.bc").is_file():
            return d
    return None


def device_libs_clang(device_libs: Path) -> str | None:
    """The clang release that built the device libraries ("15.0.5"), from the llvm.ident string their bitcode
    carries: they work with clang of that major release only."""
    try:
        data = (device_libs / "ocml.bc").read_bytes()
    except OSError:
        return None
    m = _BITCODE_IDENT.search(data)
    return m.group(1).decode() if m else None


def _choose(clangs: Sequence[_Clang], env: Mapping[str, str], libs_clang: str | None) -> _Clang | None:
    """$HIP_CLANG_PATH's clang when set; else the first whose major release built the device libraries;
    else the first found."""
    if not clangs:
        return None
    pinned = env.get("HIP_CLANG_PATH")
    if pinned and Path(clangs[0].path).parent == Path(pinned):
        return clangs[0]
    major = libs_clang.split(".", 1)[0] if libs_clang else None
    return next((c for c in clangs if major is not None and c.major == major), clangs[0])


def library_archs(device_libs: Path) -> tuple[str, ...] | None:
    """The gfx processors the device libraries have an ISA-version library for; None when they ship none
    (newer ROCm releases, which then build for whatever clang targets)."""
    archs = []
    for entry in device_libs.iterdir():
        m = _ISA_FILE.match(entry.name)
        if m:
            archs.append(f"gfx{m.group('suffix')}")
    return tuple(sorted(archs, key=arch_sort_key)) if archs else None


def _find_rocm_path(env: Mapping[str, str]) -> Path | None:
    for root in [*_rocm_roots(env), Path("/usr")]:
        if (root / "include" / "hip" / "hip_runtime.h").is_file():
            return root
    return None


def hip_version(rocm_path: Path) -> str | None:
    """ "5.2.21153" from include/hip/hip_version.h."""
    header = rocm_path / "include" / "hip" / "hip_version.h"
    try:
        text = header.read_text(errors="replace")
    except OSError:
        return None
    parts = {m.group("part"): m.group("value") for m in _HIP_VERSION.finditer(text)}
    if not all(p in parts for p in ("MAJOR", "MINOR", "PATCH")):
        return None
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"


def discover_hip_toolchain(env: Mapping[str, str] | None = None) -> HipToolchain:
    """Look for every tool. Never raises: what is missing is None (`HipToolchain.missing` says it in words)."""
    env = dict(os.environ if env is None else env)
    clangs = _clangs(env)
    libs = _find_device_libs(env, clangs)
    libs_clang = device_libs_clang(libs) if libs else None
    chosen = _choose(clangs, env, libs_clang)
    rocm = _find_rocm_path(env)
    beside = Path(chosen.path).resolve().parent if chosen else None
    return HipToolchain(
        clang=chosen.path if chosen else None,
        clang_version=chosen.version if chosen else None,
        rocm_path=str(rocm) if rocm else None,
        hip_version=hip_version(rocm) if rocm else None,
        device_libs=str(libs) if libs else None,
        objdump=_executable(beside / "llvm-objdump") if beside else None,
        readelf=_executable(beside / "llvm-readelf") if beside else None,
        clang_archs=chosen.archs if chosen else (),
        library_archs=library_archs(libs) if libs else None,
        device_libs_clang=libs_clang,
    )
