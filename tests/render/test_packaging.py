"""The report templates and the results schema ship inside the wheel, and render from an installed copy."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_wheel_ships_templates_and_schema_and_renders_from_them(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    shutil.copytree(ROOT / "gpuemu_ci", source / "gpuemu_ci", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, source / name)
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr
    wheel = next((tmp_path / "dist").glob("gpuemu_ci-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = {f"gpuemu_ci/templates/{p.name}" for p in (ROOT / "gpuemu_ci" / "templates").glob("*.j2")}
    assert {"gpuemu_ci/templates/comment.md.j2", "gpuemu_ci/templates/report.html.j2"} <= templates
    assert templates <= names
    assert "gpuemu_ci/schemas/results.schema.json" in names

    target = tmp_path / "installed"
    zipfile.ZipFile(wheel).extractall(target)
    probe = (
        "import gpuemu_ci, json, sys\n"
        "from gpuemu_ci.render.markdown import render_summary\n"
        "from gpuemu_ci.render.html import render_html\n"
        "from gpuemu_ci.results.codec import from_json\n"
        "from gpuemu_ci.results.schema import published_schema_text\n"
        "doc = {'schema_version': '2', 'verdict': 'error', 'exit_code': 3, 'seed': 1, 'generator_version': '3',"
        " 'suite': 'quick', 'started_at': '', 'finished_at': '', 'config': {'path': 'g.toml', 'sha256': '0' * 64},"
        " 'environment': {'python': '3', 'numpy': '2', 'platform': 'p', 'executable': 'python'}}\n"
        "report = from_json(json.dumps(doc))\n"
        "print(gpuemu_ci.__file__)\n"
        "print(render_summary(report).splitlines()[0])\n"
        "print(render_html(report).splitlines()[0], json.loads(published_schema_text())['title'])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    where, summary, page = done.stdout.splitlines()
    assert Path(where).is_relative_to(target)
    assert summary == "## ⚠️ gpuemu-ci ERROR: nothing was tested"
    assert page == "<!DOCTYPE html> gpuemu-ci results document (schema version 2)"
