"""lint_variants (what `gpuemu-ci mutate` judges a CUDA mutant with): other texts of a kernel's source, linted
with the real nvcc as the file itself would be, the file never written."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from gpuemu_ci.config.model import ArtifactChecks
from gpuemu_ci.lint.run import lint_variants
from gpuemu_ci.results.kernels import KernelStatus
from tests.lint.support_lint import ptx_pattern, requires_nvcc, spec

KERNEL = """#include "scale.cuh"
extern "C" __global__ void scale(const float* x, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = FACTOR * x[i];
}
"""


@requires_nvcc
@pytest.mark.slow
def test_texts_compile_as_the_file_would_and_say_what_differs(tmp_path: Path) -> None:
    source = tmp_path / "scale.cu"
    source.write_text(KERNEL)
    (tmp_path / "scale.cuh").write_text("#define FACTOR 3.0f\n")  # found next to the file, as nvcc finds it
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    checks = ArtifactChecks(required_patterns=(ptx_pattern(r"^mul\.f32"),))
    texts = [
        KERNEL,
        KERNEL,
        KERNEL.replace("FACTOR * x[i]", "x[i]"),  # drops the multiply the checks require
        KERNEL.replace("i < n", "i <= n"),  # other code, every check kept
        KERNEL.replace("if (i < n)", "if (i < n"),  # does not compile
    ]
    same, again, unchecked, other, broken = lint_variants(
        spec("scale", source, checks=checks), texts, root=tmp_path, jobs=2
    )
    assert hashlib.sha256(source.read_bytes()).hexdigest() == digest
    assert same.result.status is KernelStatus.PASSED and same.result.source == "scale.cu"
    assert same.ptx_digest is not None and same.ptx_digest == again.ptx_digest
    assert unchecked.result.status is KernelStatus.FAILED and unchecked.result.error is None
    assert [v.metric for v in unchecked.result.errors] == ["required_ptx_pattern"]
    assert other.result.status is KernelStatus.PASSED and other.ptx_digest != same.ptx_digest
    assert other.ptx_counts != same.ptx_counts
    assert broken.result.status is KernelStatus.FAILED and broken.result.error is not None
    assert broken.result.error.file == "scale.cu" and broken.result.error.line == 4  # never the copy's path
