"""An op or a reference whose signature cannot take the inputs gpuemu.toml gives it is one config error (exit 2)
naming the function and the parameter, not one identical failure per case (issue #27: 33 of them)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES
from tests.support_cli import CliResult

pytestmark = pytest.mark.slow

EDITS = {
    "reference": ("kernels/reference.py", "def softmax(x: np.ndarray)", "def softmax(inp: np.ndarray)"),
    "op": ("kernels/softmax.py", "def softmax(x: np.ndarray", "def softmax(logits: np.ndarray"),
}


@pytest.mark.parametrize("who", sorted(EDITS))
def test_a_signature_that_cannot_take_the_inputs_is_one_config_error(
    cli: Callable[..., CliResult], tmp_path: Path, who: str
) -> None:
    project = tmp_path / "quickstart"
    shutil.copytree(EXAMPLES / "quickstart", project, ignore=shutil.ignore_patterns("gpuemu-out"))
    name, old, new = EDITS[who]
    source = project / name
    text = source.read_text()
    assert old in text, f"the quickstart's {name} changed"
    source.write_text(text.replace(old, new, 1))
    out = tmp_path / "out"
    result = cli("run", "--config", project / "gpuemu.toml", "--op", "softmax", "--no-lint", "--out", out)
    assert result.code == 2, result.output
    renamed = new.split("(")[1].split(":")[0]
    (error,) = [
        line for line in result.output.splitlines() if "cannot be called as gpuemu-ci calls it" in line
    ]
    assert f"softmax({renamed})" in error and "no parameter named 'x'" in error
    assert f"parameter '{renamed}' is given no value" in error
    assert f"the {who} could not be loaded" in error
    (op,) = json.loads((out / "results.json").read_text())["ops"]
    assert op["status"] == "error" and op["import_error"] is True
    assert op["failures"] == [] and op["cases_total"] == 0  # no case was counted against the kernel
