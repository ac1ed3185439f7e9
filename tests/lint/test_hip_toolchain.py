"""Finding the HIP toolchain: clang with the AMDGPU backend, the device libraries, the HIP headers, and the
readers beside clang; which gfx archs it can build for, and the variables that pin each part."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest

from gpuemu_ci.lint.hip_toolchain import (
    HipToolchain,
    device_libs_clang,
    discover_hip_toolchain,
    hip_version,
    library_archs,
)
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


@pytest.mark.slow
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


@requires_hip
def test_the_clang_that_built_the_device_libraries_is_preferred() -> None:
    """Device library bitcode works within one LLVM major release: among several clangs (Debian 12 has 15 and
    16, its rocm-device-libs are clang 15's), the one of the libraries' release is chosen."""
    tc = hip_toolchain()
    assert tc.device_libs is not None and tc.device_libs_clang is not None
    assert device_libs_clang(Path(tc.device_libs)) == tc.device_libs_clang
    assert (
        tc.clang_version is not None and tc.clang_version.split(".")[0] == tc.device_libs_clang.split(".")[0]
    )
    assert tc.mismatch is None


def test_a_mismatch_is_said() -> None:
    tc = HipToolchain("clang++", "16.0.6", "/usr", None, "/libs", None, None, device_libs_clang="15.0.5")
    assert tc.mismatch is not None and tc.mismatch.startswith(
        "clang 16.0.6 uses device libraries built by clang 15.0.5"
    )
    assert dataclasses.replace(tc, clang_version="15.0.6").mismatch is None
    assert dataclasses.replace(tc, device_libs_clang=None).mismatch is None


def test_the_libraries_release_is_read_from_their_bitcode(tmp_path: Path) -> None:
    (tmp_path / "ocml.bc").write_bytes(b"BC\xc0\xde...\x00Debian clang version 15.0.5wchar_size")
    assert device_libs_clang(tmp_path) == "15.0.5"
    (tmp_path / "ocml.bc").write_bytes(b"BC\xc0\xde")
    assert device_libs_clang(tmp_path) is None
    assert device_libs_clang(tmp_path / "nowhere") is None
