"""`gpuemu-ci lint` as a user runs it: a real gpuemu.toml, real nvcc, exit codes and --json."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.lint.support_lint import SRC, requires_nvcc
from tests.support_cli import CliResult, run_cli

CONFIG = """
[project]
name = "demo"

[[kernels]]
name = "gelu"
source = "kernels/gelu.cu"
archs = ["sm_80"]
[kernels.artifact_checks]
max_registers = {cap}

[[kernels]]
name = "templ"
source = "kernels/templ.cu"
archs = ["sm_80"]
entries = ["{entry}"]

[[kernels]]
name = "bad"
source = "kernels/bad.cu"
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUEMU_USER_CONFIG", "none")
    (tmp_path / "kernels").mkdir()
    for name in ("gelu.cu", "templ.cu"):
        shutil.copy(SRC / name, tmp_path / "kernels" / name)
    (tmp_path / "kernels" / "bad.cu").write_text("__global__ void k(float* p) {\n  p[0] = oops;\n}\n")
    return tmp_path


def _write(project: Path, cap: int = 64, entry: str = "ops::add") -> Path:
    path = project / "gpuemu.toml"
    path.write_text(CONFIG.format(cap=cap, entry=entry))
    return path


def _run(*args: str) -> CliResult:
    return run_cli(["lint", *args])


@pytest.mark.slow
@requires_nvcc
def test_clean_run_prints_json_on_stdout_and_table_on_stderr(project: Path) -> None:
    result = _run("--config", str(_write(project)), "--kernel", "gelu", "--kernel", "templ", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["exit_code"] == 0 and doc["lint"]["status"] == "ran"
    assert [k["name"] for k in doc["kernels"]] == ["gelu", "templ"]
    gelu = doc["kernels"][0]["entries"][0]
    assert (gelu["kernel"], gelu["arch"], gelu["registers"], gelu["spill_stores"]) == ("gelu", "sm_80", 12, 0)
    assert gelu["toolchain"]["arch"] == "sm_80" and gelu["toolchain"]["nvcc"]
    assert "ops::add(float*, float const*)" in result.stderr and "1 passed" not in result.stdout
    assert "2 passed, 0 failed" in result.stderr


@pytest.mark.slow
@requires_nvcc
def test_register_cap_exits_1_with_the_violation_on_stderr(project: Path) -> None:
    result = _run("--config", str(_write(project, cap=8)), "--kernel", "gelu", "--arch", "sm_90")
    assert result.exit_code == 1
    # --arch replaces the config's sm_80; gelu needs 14 registers on sm_90 with nvcc 13.0.
    assert "gelu [sm_90]: registers 14 exceeds max_registers = 8" in result.stderr
    assert "sm_80" not in result.stderr
    assert result.stdout == ""


@requires_nvcc
def test_syntax_error_exits_1_pointing_at_the_line(project: Path) -> None:
    result = _run("--config", str(_write(project)), "--kernel", "bad")
    assert result.exit_code == 1
    assert 'kernels/bad.cu:2: error: identifier "oops" is undefined' in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.slow
@requires_nvcc
def test_ambiguous_entry_exits_2(project: Path) -> None:
    result = _run("--config", str(_write(project, entry="add")), "--kernel", "templ")
    assert result.exit_code == 2
    assert "entry 'add' is ambiguous" in result.stderr and "Traceback" not in result.output


def test_unknown_kernel_name_exits_2(project: Path) -> None:
    result = _run("--config", str(_write(project)), "--kernel", "nope")
    assert result.exit_code == 2
    assert "--kernel 'nope' is not a [[kernels]] name; the config has: bad, gelu, templ" in result.stderr


def test_missing_config_exits_2(tmp_path: Path) -> None:
    result = _run("--config", str(tmp_path / "missing.toml"))
    assert result.exit_code == 2 and "missing.toml" in result.stderr


@pytest.mark.slow
def test_no_nvcc_exits_3(project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    result = _run("--config", str(_write(project)), "--kernel", "gelu")
    if "neither nvcc nor NVRTC was found" not in result.stderr:
        pytest.skip("NVRTC or nvcc is installed as a Python package here")
    assert result.exit_code == 3
    assert "Install the CUDA toolkit" in result.stderr
