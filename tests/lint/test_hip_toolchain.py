"""Finding the HIP toolchain: clang with the AMDGPU backend, the device libraries, the HIP headers, and the
readers beside clang; which gfx archs it can build for, and the variables that pin each part."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from gpuemu_ci.lint.hip_toolchain import discover_hip_toolchain, hip_version, library_archs
from tests.lint.support_hip import hip_toolchain, requires_hip


@requires_hip
def test_the_toolchain_of_this_machine() -> None:
    tc = hip_toolchain()
    assert tc.missing == ()
    assert tc.clang is not None and tc.clang_version is not None and tc.clang_version[0].isdigit()
    clang_dir = Path(tc.clang).resolve().parent
    assert tc.readelf == str(clang_dir / "llvm-readelf") and tc.objdump == str(clang_dir / "llvm-objdump")
    assert tc.device_libs is not None and (Path(tc.device_libs) / "ocml.bc").is_file()
    assert tc.rocm_path is not None and (Path(tc.rocm_path) / "include" / "hip" / "hip_runtime.h").is_file()
    assert "gfx90a" in tc.supported_archs and tc.default_arch == "gfx90a"
    assert set(tc.supported_archs) <= set(tc.clang_archs)
    if tc.library_archs is not None:
        assert set(tc.supported_archs) <= set(tc.library_archs)


@requires_hip
def test_hip_clang_path_pins_the_clang(tmp_path: Path) -> None:
    tc = hip_toolchain()
    assert tc.clang is not None
    pinned = discover_hip_toolchain({**os.environ, "HIP_CLANG_PATH": str(Path(tc.clang).resolve().parent)})
    assert Path(pinned.clang or "").resolve() == Path(tc.clang).resolve()
    assert pinned.clang_version == tc.clang_version
    # A directory without clang++ does not stop the search.
    assert discover_hip_toolchain({**os.environ, "HIP_CLANG_PATH": str(tmp_path)}).clang == tc.clang


@requires_hip
def test_hip_device_lib_path_pins_the_libraries(tmp_path: Path) -> None:
    tc = hip_toolchain()
    assert tc.device_libs is not None
    libs = tmp_path / "bitcode"
    libs.mkdir()
    for name in ("ocml.bc", "ockl.bc", "oclc_isa_version_90a.bc", "oclc_isa_version_1030.bc"):
        shutil.copy(Path(tc.device_libs) / name, libs / name)
    pinned = discover_hip_toolchain({**os.environ, "HIP_DEVICE_LIB_PATH": str(libs)})
    assert pinned.device_libs == str(libs)
    assert pinned.library_archs == ("gfx90a", "gfx1030")
    assert pinned.supported_archs == ("gfx90a", "gfx1030")


def test_nothing_found_is_said_in_words(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "ROCM_PATH": str(tmp_path), "HIP_DEVICE_LIB_PATH": str(tmp_path)}
    tc = discover_hip_toolchain(env)
    assert tc.clang is None and tc.default_arch is None and tc.supported_archs == ()
    assert "a clang with the AMDGPU backend" in tc.missing and "llvm-readelf (beside clang)" in tc.missing


def test_libraries_without_isa_files_limit_nothing(tmp_path: Path) -> None:
    (tmp_path / "ocml.bc").write_bytes(b"")
    assert library_archs(tmp_path) is None
    (tmp_path / "oclc_isa_version_942.bc").write_bytes(b"")
    assert library_archs(tmp_path) == ("gfx942",)


def test_the_hip_version_from_its_header(tmp_path: Path) -> None:
    header = tmp_path / "include" / "hip" / "hip_version.h"
    header.parent.mkdir(parents=True)
    header.write_text(
        "#define HIP_VERSION_MAJOR 6\n#define HIP_VERSION_MINOR 2\n#define HIP_VERSION_PATCH 41133\n"
    )
    assert hip_version(tmp_path) == "6.2.41133"
    header.write_text("#define HIP_VERSION_MAJOR 6\n")
    assert hip_version(tmp_path) is None
    assert hip_version(tmp_path / "nowhere") is None
