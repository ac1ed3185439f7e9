"""Nothing in the workspace stands in for the tool (issue #52, item 3).

A workspace holding `gpuemu_ci/`, `numpy/` and `jinja2/` folders (each of which, when imported, leaves a mark
and raises): the workers and the zygote start with `-P`, a stray `:` in PYTHONPATH does not bring the working
directory back, the user's directory comes after the tool's own packages, and `python -m gpuemu_ci` drops the
working directory it put on sys.path. The user's own package still imports from the config's directory, first:
even one named like a package installed in the environment (a stale installed copy must not be what is tested).
Before, the workers imported the workspace's `gpuemu_ci` (exit 3, nothing run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.hostile.support_hostile import REPO, environment, op_table, write_project

SHADOWS = ("gpuemu_ci", "numpy", "jinja2")
# Installed here (pytest's own dependency) and not one of the tool's: the user's `pluggy/` must win over it.
USER_PACKAGE = "pluggy"

KERNELS = """
import numpy as np

def double(x):
    assert hasattr(np, "float32"), "the workspace's numpy/ was imported"
    return x * x.dtype.type(2)

def double_ref(x):
    return x * 2.0
"""


def _workspace(root: Path) -> Path:
    for name in SHADOWS:
        package = root / name
        package.mkdir(parents=True)
        mark = root / f"imported-{name}"
        (package / "__init__.py").write_text(
            f"open({str(mark)!r}, 'w').close()\nraise ImportError('the workspace shadowed {name}')\n"
        )
    user = root / USER_PACKAGE
    user.mkdir()
    (user / "__init__.py").write_text("")
    (user / "kernels.py").write_text(textwrap.dedent(KERNELS))
    table = op_table("double", f"{USER_PACKAGE}.kernels:double", f"{USER_PACKAGE}.kernels:double_ref")
    write_project(root, "", [table], iterations=3)
    return root


def _marks(root: Path) -> list[str]:
    return sorted(p.name for p in root.glob("imported-*"))


def _gpuemu(root: Path, *args: str, safe_path: bool, pythonpath: str) -> subprocess.CompletedProcess[str]:
    env = environment(root, PYTHONPATH=pythonpath)
    flags = ["-P"] if safe_path else []
    return subprocess.run(
        [sys.executable, *flags, "-m", "gpuemu_ci", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
@pytest.mark.parametrize("pythonpath", ["{repo}", "{repo}" + os.pathsep], ids=["plain", "stray-separator"])
def test_workspace_folders_do_not_shadow_the_tool_in_its_workers(tmp_path: Path, pythonpath: str) -> None:
    root = _workspace(tmp_path / "ws")
    done = _gpuemu(
        root, "run", "--no-lint", "--out", "out", safe_path=True, pythonpath=pythonpath.format(repo=REPO)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert _marks(root) == []
    results = json.loads((root / "out" / "results.json").read_text())
    (op,) = results["ops"]
    assert op["name"] == "double" and op["status"] == "passed" and op["cases_total"] > 0


@pytest.mark.slow
def test_python_m_gpuemu_ci_renders_with_its_own_jinja2(tmp_path: Path) -> None:
    """`python -m gpuemu_ci` from a workspace holding `jinja2/` and `numpy/` (its `gpuemu_ci/` would be the
    module run itself: Python's rule, which `gpuemu-ci` and `python -P -m gpuemu_ci` avoid)."""
    root = _workspace(tmp_path / "ws")
    done = _gpuemu(root, "run", "--no-lint", "--out", "out", safe_path=True, pythonpath=str(REPO))
    assert done.returncode == 0, done.stderr[-3000:]
    (root / "gpuemu_ci" / "__init__.py").unlink()
    (root / "gpuemu_ci").rmdir()
    for kind in ("comment", "html"):
        rendered = _gpuemu(root, "render", kind, "out/results.json", safe_path=False, pythonpath=str(REPO))
        assert rendered.returncode == 0, rendered.stderr[-3000:]
        assert "double" in rendered.stdout
    assert _marks(root) == []
