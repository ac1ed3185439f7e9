"""`[ops.intermediates]` (issue #44): quantities an op computes itself from exact values, declared in either
TOML form, kept in the order written, and every mistake a config error (exit 2) that names the key."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpuemu_ci.config.load import load_config
from gpuemu_ci.config.model import Intermediate, IntermediateEffect
from gpuemu_ci.errors import ConfigError, ExitCode

FILES = {"m/__init__.py": "", "m/ops.py": "def f(x, position_offset=0):\n    return x\n"}


def op_table(extra: str, after: str = "") -> str:
    return f"""
[[ops]]
name = "rope"
op = "m.ops:f"
reference = "m.ops:f"
family = "elementwise"
kwargs = {{ position_offset = [0, 2048] }}
{extra}
[ops.dims]
T = {{ min = 1, max = 512, typical = [256] }}
D = [64]
[ops.inputs]
x = ["T", "D"]
{after}
"""


def declared(make_project: Callable[..., Path], extra: str, after: str = "") -> tuple[Intermediate, ...]:
    config = load_config(make_project(op_table(extra, after), FILES))
    return config.ops[0].error_model.intermediates


def error(make_project: Callable[..., Path], extra: str, after: str = "") -> str:
    with pytest.raises(ConfigError) as info:
        declared(make_project, extra, after)
    assert info.value.exit_code is ExitCode.USAGE
    return str(info.value)


def test_both_forms_declare_the_same_intermediates_in_the_order_written(make_project):
    inline = declared(
        make_project,
        'intermediates = { angle = { effect = "rotation", max = "T + position_offset" }, '
        'inv = { effect = "scale", dtype = "bf16" } }',
    )
    tables = declared(
        make_project,
        "",
        '[ops.intermediates.angle]\neffect = "rotation"\nmax = "T + position_offset"\n'
        '[ops.intermediates.inv]\neffect = "scale"\ndtype = "bfloat16"\n',
    )
    expected = (
        Intermediate("angle", IntermediateEffect.ROTATION, None, "T + position_offset"),
        Intermediate("inv", IntermediateEffect.SCALE, "bfloat16", None),
    )
    assert inline == tables == expected
    assert declared(make_project, "") == ()


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ('intermediates = { angle = { max = "T" } }', 'needs `effect = "rotation"` or `"scale"`'),
        ('intermediates = { angle = { effect = "rotate", max = "T" } }', "unknown value 'rotate'"),
        ('intermediates = { angle = { effect = "rotation" } }', 'effect = "rotation" needs `max`'),
        (
            'intermediates = { angle = { effect = "rotation", max = "T + offset" } }',
            "unknown name(s) offset (dims and kwargs: D, T, position_offset)",
        ),
        ('intermediates = { angle = { effect = "rotation", max = "T ** 2" } }', "intermediates.angle.max"),
        ('intermediates = { angle = { effect = "scale", dtpye = "float32" } }', "unknown key `dtpye`"),
        (
            'intermediates = { angle = { effect = "scale", dtype = "int32" } }',
            "int32 is not a floating-point",
        ),
        ('intermediates = { angle = { effect = "scale", dtype = "flaot32" } }', "unknown dtype 'flaot32'"),
        ('intermediates = { angle = "rotation" }', "must be a table"),
        ('intermediates = "angle"', "must be a table"),
    ],
)
def test_bad_declarations_are_config_errors(make_project, extra, words):
    assert words in error(make_project, extra)


def test_the_cli_exits_2_on_a_bad_declaration(make_project, cli):
    config = make_project(op_table('intermediates = { angle = { effect = "rotation" } }'), FILES)
    result = cli("run", "--config", config)
    assert result.code == 2
    assert "needs `max`" in result.stderr and "Traceback" not in result.output
