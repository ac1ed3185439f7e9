"""`gpuemu-ci render FORMAT RESULTS`: every format from a real run, to stdout or a file; bad input
exits 2 with one clear line, never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuemu_ci.cli.render import RENDERERS, Format
from tests.support_cli import CliResult
from tests.support_tiers import runs_a_gate

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
@runs_a_gate
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """results.json of tests/fixtures/render-project (shared with the other render tests)."""
    out = tmp_path_factory.getbasetemp() / "gpuemu-real-runs" / "mixed"
    path = out / "out" / "results.json"
    if not path.exists():
        shutil.copytree(ROOT / "tests" / "fixtures" / "render-project", out / "project", dirs_exist_ok=True)
        for source in ("gelu.cu", "spill.cu"):
            shutil.copy(
                ROOT / "tests" / "fixtures" / "ptx-lint" / "src" / source, out / "project" / "kernels"
            )
        done = subprocess.run(
            [sys.executable, "-m", "gpuemu_ci", "run", "--config", "gpuemu.toml", "--out", str(out / "out")],
            cwd=out / "project",
            env={**os.environ, "GPUEMU_USER_CONFIG": "none"},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert path.exists(), done.stderr
    return path


def test_every_format_has_a_renderer() -> None:
    assert set(RENDERERS) == set(Format)


@pytest.mark.slow
@pytest.mark.parametrize("kind", [f.value for f in Format])
def test_render_to_a_file(results: Path, tmp_path: Path, kind: str, cli: Callable[..., CliResult]) -> None:
    output = tmp_path / "nested" / f"report.{kind}"
    result = cli(
        "render",
        kind,
        results,
        "-o",
        output,
        "--job",
        "gate",
        "--run-url",
        "https://github.com/o/r/actions/runs/1",
    )
    assert result.code == 0
    data = output.read_bytes()
    assert data and f"wrote the {kind} ({len(data):,} bytes) to {output}" in result.stderr
    text = data.decode("utf-8")
    first = {
        "comment": "<!-- gpuemu-ci:v1 key=gate -->",
        "summary": "## ❌ gpuemu-ci FAILED",
        "sarif": "{",
        "junit": "<?xml version='1.0' encoding='utf-8'?>",
        "html": "<!DOCTYPE html>",
        "annotations": "::error file=gpuemu.toml,",
    }[kind]
    assert text.startswith(first)
    if kind == "sarif":
        assert json.loads(text)["version"] == "2.1.0"


@pytest.mark.slow
def test_render_to_stdout_as_utf8_bytes(results: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gpuemu_ci", "render", "comment", str(results)],
        capture_output=True,
        timeout=120,
        env={**os.environ, "PYTHONIOENCODING": "ascii"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode("utf-8").startswith("<!-- gpuemu-ci:v1 key=default -->\n## ❌ gpuemu-ci FAILED")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "results file not found"),
        ("not json", "is not a gpuemu-ci results document: not JSON"),
        ("[1, 2]", "is not a gpuemu-ci results document"),
        ('{"schema_version": "9", "ops": []}', "has results schema version '9'"),
        ('{"schema_version": "2", "ops": [{"name": 3}]}', "Expected `str`, got `int` - at `$.ops[0].name`"),
        (
            '{"schema_version": "2", "verdict": "great", "ops": [], "config": {"path": "g.toml"}}',
            "- at `$.verdict`",
        ),
    ],
)
def test_bad_results_exit_2(
    tmp_path: Path, content: str | None, message: str, cli: Callable[..., CliResult]
) -> None:
    path = tmp_path / "results.json"
    if content is not None:
        path.write_text(content)
    result = cli("render", "summary", path)
    assert result.code == 2
    err = result.stderr
    assert message in err and "Traceback" not in err and err.count("\n") == 1


@pytest.mark.slow
def test_unknown_format_and_unwritable_output_exit_2(
    results: Path, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    result = cli("render", "pdf", results)
    assert result.code == 2 and "'pdf' is not one of" in result.stderr
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = cli("render", "junit", results, "-o", blocker / "x.xml")
    assert result.code == 2 and f"cannot write {blocker / 'x.xml'}" in result.stderr
