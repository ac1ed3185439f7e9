"""A HIP kernel's launch: gpuemu-ci cannot run it (no launch path tested on an AMD GPU), so it is never
counted as passed: `skipped (no AMD GPU)` where there is none, an error with --require-gpu or where there is
one. Detection reads the amdgpu driver's KFD topology."""

from __future__ import annotations

import json
from pathlib import Path

from gpuemu_ci.backends.amd_gpu import gpu_nodes, has_amd_gpu
from gpuemu_ci.config.load import load_config
from gpuemu_ci.pipeline.gate import _hip_launch_not_run
from gpuemu_ci.results.model import OpStatus
from tests.support_cli import run_cli

PROJECT = """
[ci]
lint = false
[[kernels]]
name = "gelu"
source = "gelu.hip"
reference = "ref:f"
family = "elementwise"
[kernels.dims]
N = [64]
[kernels.inputs]
x = ["N"]
[kernels.launch]
kernel = "gelu"
grid = [1]
block = [64]
args = ["x", "out", "N"]
output = ["N"]
"""
FILES = {
    "gelu.hip": "__global__ void gelu(const float*, float*, int) {}\n",
    "ref.py": "def f(x):\n    return x\n",
}


def _op(make_project):
    return load_config(make_project(PROJECT, FILES)).kernel_ops[0]


def test_a_hip_launch_is_skipped_on_a_machine_without_an_amd_gpu(make_project, tmp_path: Path) -> None:
    config = make_project(PROJECT, FILES)
    result = run_cli(["run", "--config", config, "--out", tmp_path / "out"], env={"GPUEMU_NO_GPU": "1"})
    document = json.loads((tmp_path / "out" / "results.json").read_text())
    (op,) = document["ops"]
    assert (op["status"], op["skip_reason"]) == ("skipped", "no AMD GPU")
    assert op["message"] == "a HIP kernel's launch needs an AMD GPU and none was found"
    assert "SKIP  gelu: skipped (no AMD GPU)" in result.output
    assert result.code != 0  # nothing ran: lint is off and the launch did not run
    assert document["verdict"] != "passed"


def test_require_gpu_makes_it_an_error(make_project, tmp_path: Path) -> None:
    config = make_project(PROJECT, FILES)
    result = run_cli(
        ["run", "--config", config, "--out", tmp_path / "out", "--require-gpu"], env={"GPUEMU_NO_GPU": "1"}
    )
    assert result.code == 3, result.output
    (op,) = json.loads((tmp_path / "out" / "results.json").read_text())["ops"]
    assert op["status"] == "error" and op["message"].endswith("(--require-gpu)")


def test_with_an_amd_gpu_the_launch_is_an_error_that_says_why(make_project) -> None:
    result = _hip_launch_not_run(_op(make_project), require_gpu=False, amd_gpu=True)
    assert result.status is OpStatus.ERROR and result.skip_reason is None
    assert result.message == (
        "not run: gpuemu-ci does not launch HIP kernels yet (their lint runs everywhere; fuzzing them against the "
        "reference needs an AMD GPU and a launch path tested on one)"
    )


def test_replay_refuses_a_hip_launch(make_project) -> None:
    config = make_project(PROJECT, FILES)
    result = run_cli(["replay", "--config", config, "--op", "gelu", "--seed", "1"])
    assert result.code == 3
    assert "gelu is a HIP kernel's launch: gpuemu-ci does not launch HIP kernels yet" in result.stderr


def test_calibrate_and_minimize_refuse_a_hip_launch(make_project) -> None:
    config = make_project(PROJECT, FILES)
    for args in (
        ["calibrate", "--config", config, "--op", "gelu"],
        ["minimize", "--config", config, "--op", "gelu", "--seed", "1"],
    ):
        result = run_cli(args)
        assert result.code == 3, result.output
        assert "gelu is a HIP kernel's launch: gpuemu-ci does not launch HIP kernels yet" in result.stderr


def _node(root: Path, name: str, properties: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "properties").write_text(properties)


def test_gpu_nodes_of_the_kfd_topology(tmp_path: Path) -> None:
    assert gpu_nodes(tmp_path / "missing") == 0
    _node(tmp_path, "0", "cpu_cores_count 16\nsimd_count 0\ngfx_target_version 0\n")  # the CPU node
    assert gpu_nodes(tmp_path) == 0
    _node(tmp_path, "1", "cpu_cores_count 0\nsimd_count 440\ngfx_target_version 90010\n")
    _node(tmp_path, "2", "simd_count 440\n")
    (tmp_path / "3").mkdir()  # no properties: skipped, not fatal
    assert gpu_nodes(tmp_path) == 2
    assert has_amd_gpu(tmp_path)


def test_gpuemu_no_gpu_hides_it(tmp_path: Path, monkeypatch) -> None:
    _node(tmp_path, "1", "simd_count 440\n")
    monkeypatch.setenv("GPUEMU_NO_GPU", "1")
    assert not has_amd_gpu(tmp_path)
