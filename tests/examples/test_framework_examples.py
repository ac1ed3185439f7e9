"""examples/torch and examples/triton run through the real `gpuemu-ci` command, as the getting-started page
tells a user to run them: each passes as written (forward and backward judged), and each seeded bug is caught
with a seed whose printed replay command reproduces it."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

needs_torch = pytest.mark.skipif(
    find_spec("torch") is None, reason="torch is not installed (pip install torch --index-url "
    "https://download.pytorch.org/whl/cpu)"
)  # fmt: skip
needs_triton = pytest.mark.skipif(
    find_spec("torch") is None or find_spec("triton") is None,
    reason="examples/triton needs torch and triton (pip install triton)",
)
EXAMPLES = [pytest.param("torch", marks=needs_torch), pytest.param("triton", marks=needs_triton)]


def gpuemu_ci(args: list[str]) -> subprocess.CompletedProcess[str]:
    """`gpuemu-ci ARGS` from the repository root, with this checkout's package."""
    env = {**os.environ, "GPUEMU_USER_CONFIG": "none", "PYTHONPATH": str(REPO)}
    env.pop("TRITON_INTERPRET", None)  # the tool decides, as in a user's shell
    done = subprocess.run(
        [sys.executable, "-m", "gpuemu_ci", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def run_example(config: str, out: Path) -> tuple[int, dict[str, Any], str]:
    done = gpuemu_ci(["run", "--config", config, "--out", str(out)])
    return done.returncode, json.loads((out / "results.json").read_text(encoding="utf-8")), done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES)
def test_the_example_passes_forward_and_backward(example: str, tmp_path: Path) -> None:
    code, results, stderr = run_example(f"examples/{example}/gpuemu.toml", tmp_path)
    assert code == 0, stderr
    assert results["verdict"] == "passed"
    for op in results["ops"]:
        assert op["status"] == "passed", op
        assert op["cases_passed"] == op["cases_total"] > 0
        for row in op["dtypes"]:
            # backward = true: every input's gradient was judged, not only the forward
            assert row["gradients"], (op["name"], row["dtype"])
    if example == "triton" and results["environment"].get("gpu") is None:
        assert all(op["interpreter"] == "triton-interpreter" for op in results["ops"])
        ops = {op["name"]: op for op in results["ops"]}
        for op in ops.values():  # bfloat16 judged on the CPU, nothing skipped
            assert op["cases_skipped"] == 0 and {r["dtype"] for r in op["dtypes"]} == {
                "float32",
                "float16",
                "bfloat16",
            }
        [note] = ops["rmsnorm_no_other"]["triton_notes"]
        assert "rmsnorm.py:" in note and "loads masked lanes without `other`" in note
        assert ops["rmsnorm"]["triton_notes"] == []


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES)
def test_the_seeded_bug_is_caught_and_replays_from_its_seed(example: str, tmp_path: Path) -> None:
    code, results, stderr = run_example(f"examples/{example}/gpuemu-buggy.toml", tmp_path / "run")
    assert code == 1, stderr
    failed = [op for op in results["ops"] if op["status"] == "failed"]
    assert [op["name"] for op in failed] == ["swiglu" if example == "torch" else "rmsnorm"]
    failures = failed[0]["failures"]
    assert failures
    if example == "torch":
        # the forward is right: only the backward's missing term can be what failed
        assert all(f["output"] == "grad of a" for f in failures), failures
    else:
        # dividing by BLOCK instead of N is exact when N is a power of two: only other lengths fail
        lengths = {f["shapes"]["x"][-1] for f in failures}
        assert all(n & (n - 1) for n in lengths), lengths
    replay = shlex.split(failures[0]["replay"])
    assert replay[:2] == ["gpuemu-ci", "replay"]
    again = gpuemu_ci([*replay[1:], "--out", str(tmp_path / "replay")])
    assert again.returncode == 1, again.stderr
    assert f"REPRODUCED {failed[0]['name']} seed {failures[0]['case_seed']}" in again.stdout + again.stderr


def test_the_cuda_example_is_linted_and_its_launch_skipped_without_a_gpu(tmp_path: Path) -> None:
    """examples/cuda on a CPU runner: the lint runs and passes, the launch is a skip, never part of a pass: the
    run exits 3 (issue 41: it said PASSED, exit 0, because the lint passed) unless skips are allowed, when it
    says "passed with 1 skipped"; --require-gpu turns the skip into an infrastructure error."""
    from gpuemu_ci.backends import detect_gpu
    from gpuemu_ci.lint.toolchain import discover_toolchain

    if detect_gpu() is not None:
        pytest.skip("a GPU is present: the kernel would run (bench/gpu_proof.sh checks that)")
    if not discover_toolchain().ptxas:
        pytest.skip(
            "no CUDA toolchain to lint with (nvcc, or pip install nvidia-cuda-nvrtc nvidia-cuda-nvcc)"
        )
    code, results, stderr = run_example("examples/cuda/gpuemu.toml", tmp_path / "refused")
    assert code == 3 and results["verdict"] == "error", stderr
    assert "gpuemu-ci: ERROR - ops 0 passed, 0 failed, 1 skipped" in stderr
    assert "skipped ops and cases never count as passed" in stderr
    allowed = gpuemu_ci(
        ["run", "--config", "examples/cuda/gpuemu.toml", "--allow-skips", "--out", str(tmp_path / "run")]
    )
    assert allowed.returncode == 0, allowed.stderr
    assert "gpuemu-ci: PASSED with 1 skipped - ops 0 passed, 0 failed, 1 skipped" in allowed.stderr
    results = json.loads((tmp_path / "run" / "results.json").read_text(encoding="utf-8"))
    assert results["verdict"] == "passed" and results["skips_allowed"] is True
    (op,) = results["ops"]
    assert (op["name"], op["status"], op["skip_reason"], op["cases_passed"]) == (
        "gelu",
        "skipped",
        "no GPU",
        0,
    )
    (kernel,) = results["kernels"]
    assert kernel["status"] == "passed" and kernel["entries"][0]["kernel"] == "gelu_x4"
    done = gpuemu_ci(
        ["run", "--config", "examples/cuda/gpuemu.toml", "--require-gpu", "--out", str(tmp_path / "g")]
    )
    assert done.returncode == 3, done.stderr
