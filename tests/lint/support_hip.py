"""Shared helpers for the HIP lint tests: fixture paths, the real HIP toolchain, KernelSpec builders."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from gpuemu_ci.config.model import ArtifactChecks, KernelLanguage, KernelSpec
from gpuemu_ci.lint.hip_toolchain import HipToolchain, discover_hip_toolchain
from tests.lint.support_lint import spec

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
) -> KernelSpec:
    """A HIP KernelSpec as config.load would build it (absolute source path)."""
    return spec(name, source, archs, flags=flags, entries=entries, checks=checks, language=KernelLanguage.HIP)
