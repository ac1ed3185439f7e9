"""Shared helpers for the HIP lint tests: fixture paths, the real HIP toolchain, KernelSpec builders."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from gpuemu_ci.config.model import ArtifactChecks, KernelLanguage, KernelSpec
from gpuemu_ci.lint.hip_toolchain import HipToolchain, discover_hip_toolchain

HIP_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "hip-lint"
HIP_LOGS = HIP_FIXTURES / "logs"
HIP_SRC = HIP_FIXTURES / "src"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hip"


@functools.lru_cache(maxsize=1)
def hip_toolchain() -> HipToolchain:
    return discover_hip_toolchain()


def _missing() -> str:
    missing = hip_toolchain().missing
    return f"the HIP toolchain is incomplete here: {', '.join(missing)} not found" if missing else ""


requires_hip = pytest.mark.skipif(bool(_missing()), reason=_missing() or "the HIP toolchain is here")


def hip_spec(
    name: str,
    source: Path,
    archs: tuple[str, ...] = ("gfx90a",),
    *,
    flags: tuple[str, ...] = (),
    entries: tuple[str, ...] = (),
    checks: ArtifactChecks | None = None,
    defines: tuple[str, ...] = (),
) -> KernelSpec:
    """A HIP KernelSpec as config.load would build it (absolute source path)."""
    return KernelSpec(
        name=name,
        source=source.resolve(),
        archs=archs,
        flags=flags,
        defines=defines,
        entries=entries,
        artifact_checks=checks or ArtifactChecks(),
        line=1,
        language=KernelLanguage.HIP,
    )
