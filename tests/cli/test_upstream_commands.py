"""Upstream gpuemu's commands as gpuemu-ci subcommands: the same flags where the meaning is the same, a
did-you-mean (exit 2) where it differs. Real runs through `main([...])`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

CONFIG = """
[project]
name = "upstream-commands"

[validation]
dtypes = ["float32"]
seed = 3

[[ops]]
name = "scale"
module = "ops"
reference = "scripts/ref_scale.py"
execution_mode = "script_based"
family = "elementwise"
"""

FILES = {
    "ops.py": "def scale(x):\n    return x * 2\n",
    "scripts/ref_scale.py": "def reference(inputs, **kwargs):\n    return inputs['x'] * 2\n",
}
BROKEN_OP = "def scale(x):\n    out = x * 2\n    out[..., -1] = 0\n    return out\n"


@pytest.fixture
def project(make_project) -> Path:
    path: Path = make_project(CONFIG, FILES)
    return path.parent


@pytest.mark.slow
def test_test_baseline_diff_cycle_as_upstreams_guides_write_it(cli, project: Path) -> None:
    """gpuemu test; gpuemu baseline v1.0; (upgrade) gpuemu test; gpuemu diff --baseline v1.0 --fail-on-regression"""
    assert cli("test", "--quick", cwd=project).code == 0
    saved = cli("baseline", "v1.0", cwd=project)
    assert saved.code == 0, saved.stderr
    assert (project / ".gpuemu" / "baselines" / "v1.0.json").is_file()
    same = cli("diff", "--baseline", "v1.0", "--fail-on-regression", cwd=project)
    assert same.code == 0, same.stderr
    (project / "ops.py").write_text(BROKEN_OP)  # the "library upgrade"
    assert cli("test", cwd=project).code == 1  # unlike upstream, a failing test exits 1
    regressed = cli("diff", "--baseline", "v1.0", "--fail-on-regression", "--format", "json", cwd=project)
    assert regressed.code == 1
    assert json.loads(regressed.stdout)["gate_failed"] is True


@pytest.mark.slow
def test_fuzz_op_iterations_and_minimize_seed(cli, project: Path) -> None:
    (project / "ops.py").write_text(BROKEN_OP)
    fuzzed = cli("fuzz", "--op", "scale", "--iterations", "3", cwd=project)
    assert fuzzed.code == 1
    results = json.loads((project / "gpuemu-out" / "results.json").read_text())
    (op,) = results["ops"]
    assert op["cases_total"] == 3
    seed = op["failures"][0]["case_seed"]
    shrunk = cli("minimize", str(seed), "--strategy", "binary-search-dims", "--max-iters", "40", cwd=project)
    assert shrunk.code == 1 and "minimized scale seed" in shrunk.stderr, shrunk.stderr


def test_fuzz_short_flags_and_unknown_op(cli, project: Path) -> None:
    result = cli("fuzz", "-o", "nope", "-i", "5", cwd=project)
    assert result.code == 2 and "--op 'nope' is not an op" in result.stderr


@pytest.mark.parametrize(
    ("command", "words"),
    [
        (["reproduce", "123"], "gpuemu-ci replay --op OP --seed SEED"),
        (["ci", "--quick", "--format", "sarif"], "gpuemu-ci render FORMAT"),
        (["report", "--format", "junit"], "gpuemu-ci render FORMAT"),
        (["failures"], "render summary"),
        (["artifacts"], "gpuemu-ci lint --json"),
        (["coverage"], "render summary"),
        (["fuzz", "--op", "scale", "--fail-fast"], "drop the flag"),
        (["daemon", "logs"], "runs no daemon"),
    ],
)
def test_commands_that_differ_say_what_to_run(cli, project: Path, command: list[str], words: str) -> None:
    result = cli(*command, cwd=project)
    assert result.code == 2 and words in result.stderr, result.stderr


def test_daemon_start_stop_are_accepted_and_do_nothing(cli, project: Path) -> None:
    for action in ("start", "stop", "status"):
        result = cli("daemon", action, cwd=project)
        assert result.code == 0 and "runs no daemon" in result.stderr


def test_diff_with_a_tag_never_saved(cli, project: Path) -> None:
    result = cli("diff", "--baseline", "v9", cwd=project)
    assert result.code == 2 and "gpuemu-ci baseline v9" in result.stderr


def test_baseline_tag_without_a_run(cli, project: Path) -> None:
    result = cli("baseline", "v1", cwd=project)
    assert result.code == 2 and "run `gpuemu-ci test`" in result.stderr
    assert cli("baseline", "../evil", cwd=project).code == 2


def test_version(cli) -> None:
    result = cli("version")
    assert result.code == 0 and result.stdout.startswith("gpuemu-ci ")


@pytest.mark.slow
def test_lint_kernel_ptx_uses_the_kernels_checks(cli, make_project) -> None:
    """`gpuemu lint --kernel X --ptx F`: the PTX file through ptxas, judged by kernel X's artifact checks."""
    ptx = Path(__file__).parents[1] / "fixtures" / "ptx-lint" / "ptx" / "gelu.cu129.sm80.ptx"
    config = make_project(
        '[[kernels]]\nname = "fused_gelu"\nsource = "gelu.cu"\narchs = ["sm_80"]\n'
        "[kernels.artifact_checks]\nmax_registers = 1\n",
        {"gelu.cu": "__global__ void k() {}\n"},
    )
    result = cli("lint", "--config", config, "--kernel", "fused_gelu", "--ptx", ptx, "--format", "json")
    assert result.code == 1, result.stderr  # more than 1 register
    (kernel,) = json.loads(result.stdout)["kernels"]
    assert kernel["name"] == "fused_gelu" and kernel["source"].endswith("gelu.cu129.sm80.ptx")
    assert any("max_registers" in v["message"] or "registers" in v["message"] for v in kernel["violations"])


def test_doctor_says_what_differs_for_upstreams_complete_example(cli) -> None:
    complete = (
        Path(__file__).parents[1] / "fixtures" / "upstream" / "configuration" / "complete" / "gpuemu.toml"
    )
    result = cli("doctor", "--config", complete)
    assert result.code == 0, result.stderr
    out = result.stdout
    assert "runs my_project.ops.matmul.matmul(...)" in out
    assert 'declare family = "matmul"' in out and 'declare family = "norm"' in out
    assert "daemon_orchestrated: one warm reference process" in out
    assert "lists no inputs" in out and "kernel 'matmul_kernel': linted" in out


def test_doctor_on_a_config_that_does_not_load_names_the_fix(cli, make_project) -> None:
    config = make_project(
        '[[ops]]\nname = "matmul"\nreference = "r.py"\nexecution_mode = "script_based"\n', {"r.py": ""}
    )
    result = cli("doctor", "--config", config)
    assert result.code == 2 and "names no op to run" in result.stderr
