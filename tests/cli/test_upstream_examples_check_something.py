"""The five examples of gpuemu's own documentation that issue 41 found accepted while checking nothing, run as a
user migrating from gpuemu would run them: each now checks what it says (every one of these failed before)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuemu_ci.backends import detect_gpu
from gpuemu_ci.lint.toolchain import discover_toolchain
from gpuemu_ci.render.markdown import render_comment, render_summary
from gpuemu_ci.results.codec import from_json
from tests.support_cli import CliResult, run_cli

REPO = Path(__file__).resolve().parents[2]
CUDA_EXAMPLE = REPO / "examples" / "cuda"


def _toolchain() -> tuple[bool, bool]:
    found = discover_toolchain()
    return found.frontend is not None, found.sass_tool is not None


needs_cuda = pytest.mark.skipif(not _toolchain()[0], reason="no nvcc or NVRTC to lint with")
needs_sass = pytest.mark.skipif(
    not all(_toolchain()), reason="no SASS tool (pip install nvidia-cuda-nvdisasm nvidia-cuda-cuobjdump)"
)


def _cuda_example(tmp_path: Path, checks: str) -> Path:
    """examples/cuda with `checks` appended to its [kernels.artifact_checks]."""
    root = tmp_path / "cuda"
    shutil.copytree(CUDA_EXAMPLE, root)
    config = root / "gpuemu.toml"
    config.write_text(config.read_text(encoding="utf-8") + checks + "\n", encoding="utf-8")
    return config


def _lint(config: Path, **env: str) -> CliResult:
    return run_cli(["lint", "--config", config], env=env)


@pytest.mark.slow
@needs_sass
def test_forbidden_instructions_are_sass_mnemonics_matched_against_the_sass(tmp_path: Path) -> None:
    """Example 1: `forbidden_instructions = ["LDG", "STG"]` on a kernel whose every global load is an LDG was
    searched for in the PTX, where SASS never occurs: PASS, exit 0."""
    config = _cuda_example(tmp_path, 'forbidden_instructions = ["LDG", "STG"]')
    result = _lint(config)
    assert result.code == 1, result.output
    assert "gelu_x4 [sm_80]: forbidden sass pattern 'LDG' matched" in result.stderr
    assert "forbidden sass pattern 'STG' matched" in result.stderr
    # The documentation's own example: no .SYS access in this kernel, checked in the SASS, so it passes.
    upstream = _cuda_example(tmp_path / "upstream", 'forbidden_instructions = ["LDG.E.SYS", "STG.E.SYS"]')
    document = json.loads(run_cli(["lint", "--config", upstream, "--json"]).stdout)
    (kernel,) = document["kernels"]
    assert kernel["status"] == "passed" and kernel["violations"] == []
    assert kernel["entries"][0]["sass_instructions"]  # the SASS was read, so the pattern was looked for


@pytest.mark.slow
@needs_cuda
def test_a_sass_pattern_with_no_sass_tool_fails_its_kernel_unless_allowed(tmp_path: Path) -> None:
    """Example 1 without a SASS tool: `NOT CHECKED: no SASS tool` used to be a warning under a PASS."""
    config = _cuda_example(
        tmp_path, '[[kernels.artifact_checks.forbidden_patterns]]\npattern = "LDG"\ntarget = "sass"'
    )
    result = _lint(config, GPUEMU_SASS_TOOL="none")
    assert result.code == 1, result.output
    assert (
        "forbidden sass pattern 'LDG' NOT CHECKED: no SASS tool (cuobjdump or nvdisasm) found"
        in result.stderr
    )
    assert "allow_unchecked = true" in result.stderr
    run = run_cli(["run", "--config", config, "--out", tmp_path / "out", "--allow-skips"],
                  env={"GPUEMU_SASS_TOOL": "none"})  # fmt: skip
    assert run.code == 1 and "FAILED" in run.stderr, run.output
    allowed = config.read_text(encoding="utf-8").replace("[ci]\n", "[ci]\nallow_unchecked = true\n")
    config.write_text(allowed, encoding="utf-8")
    result = _lint(config, GPUEMU_SASS_TOOL="none")
    assert result.code == 0, result.output
    assert "NOT CARRIED OUT (allowed)" in result.stderr and "(allowed: ci.allow_unchecked)" in result.stderr


NAN_OPS = """
import numpy as np

def writes_nan(x):
    y = (x.astype(np.float32) * 2).astype(x.dtype)
    y[..., 0] = np.nan
    return y

def twice(x):
    return x * 2
"""


def _nan_project(make_project: Callable[..., Path], check_nan: str) -> Path:
    return make_project(
        f"""
        [validation]
        dtypes = ["float32", "float16"]
        check_nan = {check_nan}
        [ci]
        quick_iterations = 3
        quick_extra_dtype_iterations = 3
        [[ops]]
        name = "nan"
        op = "nanops:writes_nan"
        reference = "nanops:twice"
        family = "elementwise"
        [ops.dims]
        N = [8, 64]
        [ops.inputs]
        x = ["N"]
        """,
        {"nanops.py": NAN_OPS},
    )


@pytest.mark.slow
def test_check_nan_false_still_compares_nan_with_the_reference(
    make_project: Callable[..., Path], tmp_path: Path
) -> None:
    """Example 2: `check_nan = false` stopped judging NaN outputs, so an op writing NaN where the reference is
    finite passed 6/6. Off, it only drops gpuemu's extra rule: the NaN is still a wrong value."""
    config = _nan_project(make_project, "false")
    result = run_cli(["run", "--config", config, "--out", tmp_path / "out"])
    assert result.code == 1, result.output
    assert "FAIL  nan: 0/6 cases passed" in result.stderr
    assert "wrong non-finite class" in result.stderr and "got nan, reference" in result.stderr


@pytest.mark.slow
@pytest.mark.skipif(detect_gpu() is not None, reason="a GPU is present: the launch runs")
def test_a_kernel_fuzzed_without_a_gpu_is_never_part_of_a_pass(tmp_path: Path) -> None:
    """Example 3: `gpuemu-ci run --op <kernel> --iterations 500` on a machine without a GPU printed SKIP (no
    GPU), then PASSED, exit 0, because the kernel's lint passed."""
    if not _toolchain()[0]:
        pytest.skip("no nvcc or NVRTC to lint with")
    args: list[str | Path] = [
        "run",
        "--config",
        CUDA_EXAMPLE / "gpuemu.toml",
        "--op",
        "gelu",
        "--iterations",
        "500",
    ]
    result = run_cli([*args, "--out", tmp_path / "refused"])
    assert result.code == 3, result.output
    assert "SKIP  gelu: skipped (no GPU)" in result.stderr and "PASS  kernel gelu" in result.stderr
    assert "gpuemu-ci: ERROR - ops 0 passed, 0 failed, 1 skipped" in result.stderr
    allowed = run_cli([*args, "--allow-skips", "--out", tmp_path / "allowed"])
    assert allowed.code == 0, allowed.output
    assert "gpuemu-ci: PASSED with 1 skipped - ops 0 passed" in allowed.stderr
    document = from_json((tmp_path / "allowed" / "results.json").read_bytes())
    assert "passed with 1 skipped" in render_comment(document) and "passed with 1 skipped" in render_summary(
        document
    )


NEAR_OPS = """
import numpy as np

def close(x):
    return (x.astype(np.float64) + 9.16e-3).astype(x.dtype)

def exact(x):
    return x.astype(np.float64)
"""


@pytest.mark.slow
def test_warn_threshold_warns_at_that_share_of_the_allowance(
    make_project: Callable[..., Path], tmp_path: Path
) -> None:
    """Example 4: `[policies] warn_threshold = 0.8` was read as a baseline-growth ratio: an op using 91.6% of
    its tolerance got no warning. Upstream's meaning: warn at 80% of the tolerance, in every report."""
    config = make_project(
        """
        [policies]
        warn_threshold = 0.8
        [ci]
        quick_iterations = 2
        [[ops]]
        name = "close"
        op = "nearops:close"
        reference = "nearops:exact"
        [ops.tolerances]
        float32 = { atol = 1e-2, rtol = 0.0 }
        [ops.dims]
        N = [16]
        [ops.inputs]
        x = ["N"]
        """,
        {"nearops.py": NEAR_OPS},
    )
    result = run_cli(["run", "--config", config, "--out", tmp_path / "out"])
    assert result.code == 0, result.output  # a warning, not a failure
    line = "close [float32]: the worst case uses 91.6% of its allowance (policies.warn_threshold 0.8)"
    assert f"WARN  {line}" in result.stderr
    document = from_json((tmp_path / "out" / "results.json").read_bytes())
    assert document.warn_threshold == 0.8 and [
        (op.name, row.dtype) for op, row, _ in document.near_limit()
    ] == [("close", "float32")]
    shown = "the worst case uses 91.6% of its allowance (policies.warn\\_threshold 0.8)"  # Markdown-escaped
    assert shown in render_comment(document) and shown in render_summary(document), render_comment(document)
    quiet = config.read_text().replace("warn_threshold = 0.8", "warn_threshold = 0.95")
    config.write_text(quiet)
    result = run_cli(["run", "--config", config, "--out", tmp_path / "quiet"])
    assert result.code == 0 and "WARN" not in result.stderr, result.output


MATMUL_OPS = """
import numpy as np

def matmul(a, b):
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(a.dtype)

def matmul_ref(a, b):
    return a @ b
"""


@pytest.mark.slow
def test_shape_preserved_means_the_reference_outputs_shape(
    make_project: Callable[..., Path], tmp_path: Path
) -> None:
    """Example 5: `invariants = ["shape_preserved"]` compared the output with the first input, so a correct
    matmul failed 10 of 16 cases; upstream compares it with the reference output's shape."""
    config = make_project(
        """
        [[ops]]
        name = "matmul"
        schema = "matmul"
        op = "mm:matmul"
        reference = "mm:matmul_ref"
        family = "matmul"
        invariants = ["shape_preserved"]
        """,
        {"mm.py": MATMUL_OPS},
    )
    result = run_cli(["run", "--config", config, "--out", tmp_path / "out"])
    assert result.code == 0, result.output
    assert "PASS  matmul: 16/16 cases passed" in result.stderr
