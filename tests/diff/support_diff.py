"""Helpers for the diff tests: run the real `gpuemu-ci` in a subprocess, read documents, pick entries."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support_cli import run_cli

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart"
PTX_SRC = REPO / "tests" / "fixtures" / "ptx-lint" / "src"

requires_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


def gpuemu(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`gpuemu-ci ARGS` as a user runs it (a real process, the developer's user config ignored)."""
    env = dict(os.environ, GPUEMU_USER_CONFIG="none")
    env.pop("GITHUB_SHA", None)
    env.pop("GITHUB_REF", None)
    return subprocess.run(
        [sys.executable, "-m", "gpuemu_ci", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def diff_cli(*args: str | Path) -> tuple[int, dict[str, Any], str]:
    """`gpuemu-ci diff ARGS --json` in-process (the real command): (exit code, JSON on stdout, stderr)."""
    result = run_cli(["diff", *args, "--json"])
    return result.code, (json.loads(result.stdout) if result.stdout else {}), result.stderr


def load(path: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return result


def save(path: Path, document: dict[str, Any]) -> Path:
    path.write_text(json.dumps(document, indent=1), encoding="utf-8")
    return path


def entry(diff: dict[str, Any], name: str, detail: str) -> dict[str, Any]:
    """The one diff entry for `name` [dtype or arch]."""
    found = [e for e in diff["entries"] if e["name"] == name and e["variant"] == detail]
    listed = [(e["name"], e["variant"]) for e in diff["entries"]]
    assert len(found) == 1, f"{name} [{detail}]: {found} in {listed}"
    result: dict[str, Any] = found[0]
    return result


def reason(e: dict[str, Any], metric: str) -> dict[str, Any]:
    found = [r for r in e["reasons"] if r["metric"] == metric]
    assert len(found) == 1, f"no single {metric!r} reason in {e['reasons']}"
    result: dict[str, Any] = found[0]
    return result


def dtype_result(results: dict[str, Any], op: str, dtype: str) -> dict[str, Any]:
    o = next(o for o in results["ops"] if o["name"] == op)
    return next(d for d in o["dtypes"] if d["dtype"] == dtype)


def kernel_entry(results: dict[str, Any], name: str, kernel: str, arch: str) -> dict[str, Any]:
    k = next(k for k in results["kernels"] if k["name"] == name)
    return next(e for e in k["entries"] if e["kernel"] == kernel and e["arch"] == arch)


def valid_diff(diff: dict[str, Any]) -> None:
    """The diff reads back as the model's BaselineDiff (types, enums, no unknown fields)."""
    import msgspec

    from gpuemu_ci.results.diff import BaselineDiff

    msgspec.json.decode(json.dumps(diff), type=BaselineDiff)


def valid_results(document: dict[str, Any]) -> None:
    """The document reads back as a results document."""
    from gpuemu_ci.results.codec import from_json

    from_json(json.dumps(document))
