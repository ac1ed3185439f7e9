"""Issue #32: an op whose inputs a hook builds, in a family whose bound reads the op's structure (the length
each output sums, which input scales it), without [ops.inputs] is refused (exit 2, naming what to declare),
rather than judged by a bound that silently runs with n = 1 and no scale. Elementwise ops need no structure."""

from __future__ import annotations

import pytest

HOOKS = """
import numpy as np

def make_inputs(rng, dims, dtype, kwargs):
    b, s, t, d = (dims.get(n, size) for n, size in (("B", 2), ("S", 1), ("T", 16), ("D", 8)))
    return {"q": np.ones((b, s, d), dtype), "k": np.ones((b, t, d), dtype), "v": np.ones((b, t, d), dtype)}

def attention(q, k, v):
    return q
"""

CONFIG = """
[validation]
dtypes = ["float32"]

[[ops]]
name = "decode"
op = "hooks:attention"
reference = "hooks:attention"
family = "{family}"
{hook} = "hooks:make_inputs"
{inputs}
"""

DECLARED = """output = ["B", "S", "D"]
[ops.dims]
B = [2]
S = [1]
T = [16]
D = [8]
[ops.inputs]
q = ["B", "S", "D"]
k = ["B", "T", "D"]
v = ["B", "T", "D"]
"""


@pytest.mark.parametrize("family", ["attention", "matmul", "reduction", "softmax", "norm"])
def test_a_hook_without_declared_inputs_is_refused_in_a_structured_family(make_project, cli, family):
    config = make_project(CONFIG.format(family=family, hook="inputs", inputs=""), {"hooks.py": HOOKS})
    result = cli("run", "--config", config, "--out", config.parent / "out", "--no-lint")
    assert result.code == 2
    message = result.stderr
    assert f'family = "{family}" with an inputs hook and no [ops.inputs]' in message
    assert "Declare [ops.inputs] next to the hook" in message and "gpuemu.toml" in message
    assert "Traceback" not in message


@pytest.mark.slow
def test_the_same_hook_with_declared_inputs_runs(make_project, cli):
    config = make_project(
        CONFIG.format(family="attention", hook="inputs_hook", inputs=DECLARED), {"hooks.py": HOOKS}
    )
    result = cli("run", "--config", config, "--out", config.parent / "out", "--no-lint")
    assert result.code in (0, 1), result.stderr  # judged (the op is not attention), not refused


@pytest.mark.slow
def test_an_elementwise_hook_needs_no_declared_inputs(make_project, cli):
    config = make_project(CONFIG.format(family="elementwise", hook="inputs", inputs=""), {"hooks.py": HOOKS})
    result = cli("run", "--config", config, "--out", config.parent / "out", "--no-lint")
    assert result.code in (0, 1), result.stderr
