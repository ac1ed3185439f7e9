"""gpuemu.toml as upstream gpuemu writes it: `framework = "pytorch"`, a dotted `module`, [[ops]] without inputs,
user defaults and ~/.gpuemu/daemon.toml with upstream's precedence, and `seed = 0`."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuemu_ci.config.load import load_config
from gpuemu_ci.config.model import Config, ExecutionMode, Framework, Suite
from gpuemu_ci.errors import ConfigError
from gpuemu_ci.pipeline.settings import RunOptions, Settings

CODE = {
    "my_project/__init__.py": "",
    "my_project/ops/__init__.py": "",
    "my_project/ops/matmul.py": "def matmul(a, b, *, transpose=False):\n    return a @ b\n",
    "my_project/ops/gelu.py": "def gelu(self, x, approximate='none'):\n    return x\n",
    "scripts/ref.py": (
        "import numpy as np\n\ndef reference(inputs: dict, **kwargs):\n"
        '    q = inputs["q"]\n    k = inputs.get("k")\n    return q @ k.T @ inputs["v"]\n'
    ),
    "scripts/matmul_ref.py": "def reference(inputs, **kwargs):\n    return inputs['a'] @ inputs['b']\n",
}


def load(make_project, text: str, env: dict[str, str] | None = None) -> Config:
    return load_config(make_project(text, CODE), env=env or {"GPUEMU_USER_CONFIG": "none"})


def error(make_project, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load(make_project, text)
    return info.value.message


OP = """
[[ops]]
name = "matmul"
module = "my_project.ops.matmul"
reference = "scripts/matmul_ref.py"
"""


@pytest.mark.parametrize(
    ("written", "framework"),
    [("pytorch", Framework.TORCH), ("torch", Framework.TORCH), ("tensorflow", Framework.TENSORFLOW)],
)
def test_upstream_framework_names(make_project, written: str, framework: Framework) -> None:
    config = load(make_project, f'[project]\nname = "p"\nframework = "{written}"\n' + OP)
    assert config.project.framework is framework and config.ops[0].targets.framework is framework


def test_misspelled_framework_gets_a_suggestion(make_project) -> None:
    message = error(make_project, '[project]\nname = "p"\nframework = "tensorflw"\n' + OP)
    assert "did you mean `tensorflow`" in message


def test_dotted_module_and_inputs_read_from_the_ops_signature(make_project) -> None:
    config = load(make_project, OP)
    op = config.ops[0]
    assert op.targets.op == "my_project.ops.matmul"
    # matmul(a, b) fits gpuemu's builtin matmul schema: a = [M, K], b = [K, N], output [M, N]
    assert [(i.name, i.dims) for i in op.shapes.inputs] == [("a", ("M", "K")), ("b", ("K", "N"))]
    assert op.shapes.output_dims == ("M", "N")
    (note,) = config.notes
    assert "lists no inputs" in note and '[ops.inputs] a = ["M", "K"]' in note
    assert "my_project/ops/matmul.py:matmul" in note


def test_inputs_from_the_keys_a_reference_reads(make_project) -> None:
    config = load(
        make_project,
        '[[ops]]\nname = "flash_attention"\nmodule = "flash_attn"\nreference = "scripts/ref.py"\n',
    )
    names = [i.name for i in config.ops[0].shapes.inputs]
    assert names == ["q", "k", "v"]  # flash_attn is not in the repository: its reference says the names
    assert "the keys it reads from `inputs` of scripts/ref.py:reference" in config.notes[0]


def test_receiver_and_defaulted_parameters_are_not_inputs(make_project) -> None:
    config = load(
        make_project, '[[ops]]\nname = "gelu"\nmodule = "my_project.ops.gelu"\nreference = "scripts/ref.py"\n'
    )
    assert [(i.name, i.dims) for i in config.ops[0].shapes.inputs] == [("x", ("B", "S", "H"))]
    assert config.ops[0].shapes.output_dims is None  # nothing is assumed about the output's shape


def test_declared_inputs_win_and_nothing_is_inferred(make_project) -> None:
    config = load(make_project, OP + 'inputs = ["a", "b"]\n')
    assert config.notes == () and config.ops[0].shapes.inferred is None


def test_no_readable_names_says_what_to_add(make_project) -> None:
    message = error(
        make_project, '[[ops]]\nname = "x"\nmodule = "somewhere.else"\nreference = "somewhere.ref:f"\n'
    )
    assert "could not read their names" in message and 'inputs = ["x"]' in message


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("client_side", ExecutionMode.CLIENT),
        ("script_based", ExecutionMode.SCRIPT),
        ("daemon_orchestrated", ExecutionMode.DAEMON),
    ],
)
def test_all_three_modes_load(make_project, mode: str, expected: ExecutionMode) -> None:
    config = load(make_project, OP + f'execution_mode = "{mode}"\n')
    assert config.ops[0].targets.execution_mode is expected


def test_daemon_side_spelling_is_explained(make_project) -> None:
    message = error(make_project, OP + 'execution_mode = "daemon_side"\n')
    assert 'its code reads "daemon_orchestrated"' in message


def test_defaults_files_precedence_project_over_user_over_daemon(make_project, tmp_path: Path) -> None:
    user, daemon = tmp_path / "user.toml", tmp_path / "daemon.toml"
    user.write_text('[project]\nframework = "pytorch"\n[ci]\nparallel_jobs = 3\n[validation]\nseed = 11\n')
    daemon.write_text(
        "[ci]\nparallel_jobs = 7\ncase_timeout = 9\n[validation]\nseed = 5\n"
        f'[daemon]\nsocket = "{tmp_path / "gpuemu.sock"}"\n'
    )
    env = {"GPUEMU_USER_CONFIG": str(user), "GPUEMU_DAEMON_CONFIG": str(daemon)}
    config = load(make_project, "[validation]\nseed = 42\n" + OP, env)
    assert config.validation.seed == 42  # the project's
    assert config.ci.parallel_jobs == 3  # the user's, over the daemon's
    assert config.ci.case_timeout == 9.0  # only the daemon file says it
    assert config.project.framework is Framework.TORCH  # [project] is allowed in user defaults
    assert any("[daemon] configures upstream's daemon" in note for note in config.notes)


def test_ops_in_a_defaults_file_are_refused(make_project, tmp_path: Path) -> None:
    daemon = tmp_path / "daemon.toml"
    daemon.write_text(OP)
    with pytest.raises(ConfigError) as info:
        load(make_project, OP, {"GPUEMU_USER_CONFIG": "none", "GPUEMU_DAEMON_CONFIG": str(daemon)})
    assert "live in the repository's gpuemu.toml" in info.value.message


def test_seed_zero_is_a_fresh_seed_per_run_as_upstream(make_project) -> None:
    config = load(make_project, "[validation]\nseed = 0\n" + OP)
    seeds = {Settings.resolve(config, RunOptions(suite=Suite.QUICK)).seed for _ in range(3)}
    assert len(seeds) == 3
    fixed = load(make_project, "[validation]\nseed = 7\n" + OP)
    assert Settings.resolve(fixed, RunOptions()).seed == 7
    unset = load(make_project, OP)
    assert {Settings.resolve(unset, RunOptions()).seed for _ in range(2)} == {0}  # not set: one fixed seed
    assert Settings.resolve(config, RunOptions(seed=0)).seed == 0  # --seed 0 is a seed


def test_a_source_linked_from_outside_the_repository_is_not_read(make_project, tmp_path: Path) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-outside.py"
    outside.write_text("def matmul(secret_a, secret_b):\n    pass\n")
    config_path = make_project(
        '[[ops]]\nname = "matmul"\nmodule = "linked"\nreference = "scripts/matmul_ref.py"\n', CODE
    )
    (config_path.parent / "linked.py").symlink_to(outside)
    config = load_config(config_path, env={"GPUEMU_USER_CONFIG": "none"})
    assert [i.name for i in config.op("matmul").shapes.inputs] == [
        "a",
        "b",
    ]  # from the reference, not the link
