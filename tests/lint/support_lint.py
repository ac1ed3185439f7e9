"""Shared helpers for the lint tests: fixture paths, KernelSpec builders, the real toolchain."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpuemu_ci.config.model import ArtifactChecks, KernelLanguage, KernelSpec, PatternCheck

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ptx-lint"
LOGS = FIXTURES / "logs"
PTX = FIXTURES / "ptx"
SASS = FIXTURES / "sass"
SRC = FIXTURES / "src"

requires_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


def spec(
    name: str,
    source: Path,
    archs: tuple[str, ...] = ("sm_80",),
    *,
    flags: tuple[str, ...] = (),
    entries: tuple[str, ...] = (),
    checks: ArtifactChecks | None = None,
    defines: tuple[str, ...] = (),
    include_dirs: tuple[Path, ...] = (),
    language: KernelLanguage = KernelLanguage.CUDA,
) -> KernelSpec:
    """A KernelSpec as config.load would build it (absolute source path)."""
    return KernelSpec(
        name=name,
        source=source.resolve(),
        archs=archs,
        flags=flags,
        include_dirs=include_dirs,
        defines=defines,
        entries=entries,
        artifact_checks=checks or ArtifactChecks(),
        line=1,
        language=language,
    )


def ptx_pattern(pattern: str) -> PatternCheck:
    return PatternCheck(pattern, "ptx")


def sass_pattern(pattern: str) -> PatternCheck:
    return PatternCheck(pattern, "sass")
