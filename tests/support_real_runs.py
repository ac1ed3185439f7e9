"""`gpuemu-ci run` on known projects, once per test session, shared by the schema and renderer tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# name: (directory in the repository, or None for a copy of the render fixture project; config; arguments)
RUNS: dict[str, tuple[str | None, str, list[str]]] = {
    "passing": (
        "",
        "examples/quickstart/gpuemu.toml",
        ["--op", "softmax", "--op", "gelu", "--iterations", "2"],
    ),
    "failing": ("", "examples/buggy/gpuemu.toml", ["--op", "softmax", "--op", "gelu", "--iterations", "6"]),
    "cut_short": ("", "examples/buggy/gpuemu.toml", ["--suite", "thorough", "--timeout", "0.5"]),
    "mixed": (None, "gpuemu.toml", []),
    "kernels": (None, "gpuemu-kernels.toml", []),
}


def real_run_with_project(base: Path, name: str) -> tuple[dict[str, Any], Path]:
    """(results.json decoded, the directory it ran in) for run `name`; runs it the first time it is asked."""
    where, config, extra = RUNS[name]
    out = base / "gpuemu-real-runs" / name
    results = out / "out" / "results.json"
    cwd = ROOT / where if where is not None else out / "project"
    if not results.exists():
        if where is None:
            shutil.copytree(ROOT / "tests" / "fixtures" / "render-project", cwd, dirs_exist_ok=True)
            for source in ("gelu.cu", "spill.cu"):
                shutil.copy(
                    ROOT / "tests" / "fixtures" / "ptx-lint" / "src" / source, cwd / "kernels" / source
                )
        command = [
            sys.executable,
            "-m",
            "gpuemu_ci",
            "run",
            "--config",
            config,
            "--out",
            str(out / "out"),
            *extra,
        ]
        env = {**os.environ, "GPUEMU_USER_CONFIG": "none"}
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        assert results.exists(), done.stderr
    return json.loads(results.read_text(encoding="utf-8")), cwd


def real_run_dir(base: Path, name: str) -> Path:
    """The directory run `name` wrote its results.json (and snapshots, error maps) to; runs it if need be."""
    real_run_with_project(base, name)
    return base / "gpuemu-real-runs" / name / "out"


def real_run(base: Path, name: str) -> dict[str, Any]:
    """results.json of run `name`, decoded."""
    return real_run_with_project(base, name)[0]
