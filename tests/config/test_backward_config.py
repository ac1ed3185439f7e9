"""`backward = true` and its keys in gpuemu.toml (issue #20): what loads, and the clear exit-2 errors for a
backward gpuemu-ci could not compute."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpuemu_ci.config.load import load_config
from gpuemu_ci.errors import ConfigError, ExitCode

FILES = {
    "m/__init__.py": "",
    "m/ops.py": "def f(x, w, target):\n    return x\n\ndef vjp(x, w, target, grad_output):\n    return grad_output\n",
}


def op_table(framework: str, extra: str) -> str:
    return f"""
[[ops]]
name = "norm"
op = "m.ops:f"
reference = "m.ops:f"
framework = "{framework}"
family = "norm"
{extra}
[ops.dims]
M = [4]
N = [8]
[ops.inputs]
x = ["M", "N"]
w = ["N"]
target = {{ dims = ["M"], dtype = "int64", kind = "index", high = "N" }}
"""


def load(make_project: Callable[..., Path], framework: str, extra: str) -> object:
    return load_config(make_project(op_table(framework, extra), FILES))


def error(make_project: Callable[..., Path], framework: str, extra: str) -> str:
    with pytest.raises(ConfigError) as info:
        load(make_project, framework, extra)
    assert info.value.exit_code is ExitCode.USAGE
    return str(info.value)


def test_torch_op_differentiates_every_float_input_by_default(make_project):
    config = load(make_project, "torch", "backward = true")
    backward = config.ops[0].backward  # type: ignore[attr-defined]
    assert backward.grad_inputs == ("x", "w")  # the int64 target has no gradient
    assert backward.vjp is None and backward.vjp_reference is None


def test_grad_inputs_vjp_and_vjp_reference_are_kept(make_project):
    extra = 'backward = true\nvjp = "m.ops:vjp"\nvjp_reference = "m.ops:vjp"\ngrad_inputs = ["x"]'
    backward = load(make_project, "numpy", extra).ops[0].backward  # type: ignore[attr-defined]
    assert (backward.grad_inputs, backward.vjp, backward.vjp_reference) == (("x",), "m.ops:vjp", "m.ops:vjp")


def test_grad_accumulators_are_kept_per_gradient_as_canonical_dtypes(make_project):
    extra = 'backward = true\ngrad_accumulators = { w = "input", x = "fp16" }'
    backward = load(make_project, "torch", extra).ops[0].backward  # type: ignore[attr-defined]
    assert backward.accumulators == (("w", "input"), ("x", "float16"))
    assert backward.accumulator_of("w") == "input" and backward.accumulator_of("target") is None


def test_an_op_without_backward_has_none(make_project):
    assert load(make_project, "torch", "").ops[0].backward is None  # type: ignore[attr-defined]


def test_numpy_op_with_backward_and_no_vjp_is_a_config_error(make_project):
    message = error(make_project, "numpy", "backward = true")
    assert "torch autograd cannot differentiate it" in message and "vjp" in message


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ('vjp = "m.ops:vjp"', "only used with `backward = true`"),
        ('grad_inputs = ["x"]', "only used with `backward = true`"),
        ('backward = true\ngrad_inputs = ["target"]', "'target' is not a float input"),
        ('backward = true\ngrad_inputs = ["nope"]', "'nope' is not a float input"),
        ('backward = true\nout_arg = "out"', "not supported with `out_arg`"),
        ('backward = true\nvjp_reference = "m/ops.py"', 'expected "pkg.mod:function"'),
        ("backward = 1", "expected"),
        ('grad_accumulators = { w = "input" }', "only used with `backward = true`"),
        ('backward = true\ngrad_accumulators = "float16"', "expected a table of input name -> dtype"),
        (
            'backward = true\ngrad_accumulators = { target = "input" }',
            "'target' is not an input whose gradient",
        ),
        ('backward = true\ngrad_accumulators = { w = "flaot16" }', "unknown dtype 'flaot16'"),
        ("backward = true\ngrad_accumulators = { w = 16 }", 'expected a dtype name or "input"'),
    ],
)
def test_bad_backward_keys_are_config_errors(make_project, extra, words):
    assert words in error(make_project, "torch", extra)


def test_cli_exits_2_for_a_numpy_backward_without_vjp(make_project, cli):
    config = make_project(op_table("numpy", "backward = true"), FILES)
    result = cli("run", "--config", config)
    assert result.code == 2
    assert "gpuemu-ci: error:" in result.stderr and "vjp" in result.stderr
    assert "Traceback" not in result.output
