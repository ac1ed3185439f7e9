"""The opt-in HIP variant of the Action's image (`docker build --build-arg GPUEMU_HIP=1`): Debian's HIP
toolchain lints the HIP example in it, with the figures of the committed outputs of the same clang 15
(tests/fixtures/hip-lint); and the default image, which has no toolchain, says so (exit 3).

Skipped unless GPUEMU_CONTAINER_HIP_IMAGE (and GPUEMU_CONTAINER_IMAGE) name built images: .ci/container builds
both and sets them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuemu_ci.lint.amdgpu_remarks import parse_remarks
from tests.container.support_docker import IMAGE, needs_image
from tests.lint.support_hip import EXAMPLE, HIP_LOGS

HIP_IMAGE = os.environ.get("GPUEMU_CONTAINER_HIP_IMAGE", "")
needs_hip_image = pytest.mark.skipif(
    not HIP_IMAGE or shutil.which("docker") is None,
    reason="GPUEMU_CONTAINER_HIP_IMAGE is not set: .ci/container builds the HIP variant and sets it",
)
FIGURES = ("vgprs", "agprs", "sgprs", "vgpr_spills", "sgpr_spills", "scratch_bytes", "lds_bytes", "occupancy")


def _lint(image: str, example: Path) -> subprocess.CompletedProcess[str]:
    """`gpuemu-ci lint --json` on a copy of examples/hip, in a throwaway container without network."""
    return subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "-v", f"{example}:/example:ro", "--entrypoint", "gpuemu-ci",
         image, "lint", "--config", "/example/gpuemu.toml", "--json"],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip


def _example(tmp_path: Path) -> Path:
    copy = tmp_path / "hip"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    os.chmod(tmp_path, 0o755)
    return copy


@needs_hip_image
def test_the_hip_image_gives_the_figures_of_debians_clang_15(tmp_path: Path) -> None:
    done = _lint(HIP_IMAGE, _example(tmp_path))
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["lint"]["toolchain"]["clang"] == "15.0.6"
    assert document["lint"]["toolchain"]["device_libs_clang"] == "15.0.5"
    compared = 0
    for kernel in document["kernels"]:
        for entry in kernel["entries"]:
            fixture = HIP_LOGS / f"{kernel['name']}-{entry['arch']}-clang15.remarks"
            (expected,) = parse_remarks(fixture.read_text()).kernels()
            assert {f: entry["amdgpu"][f] for f in FIGURES} == {f: getattr(expected, f) for f in FIGURES}, (
                fixture
            )
            compared += 1
    assert compared == 6


@needs_image
def test_the_default_image_has_no_hip_toolchain_and_says_so(tmp_path: Path) -> None:
    done = _lint(IMAGE, _example(tmp_path))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "the HIP kernels cannot be linted: a clang with the AMDGPU backend" in done.stderr
    assert "Traceback" not in done.stderr
