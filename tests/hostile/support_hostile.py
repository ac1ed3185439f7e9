"""Helpers for the hostile tests: a project whose ops and hooks misbehave, run by the real `gpuemu-ci` in a
process of its own (so that what it does to its process, and how that process ends, is what a shell sees)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

HEADER = """
[project]
name = "hostile"

[validation]
dtypes = ["float32"]
seed = 3

[ci]
quick_iterations = {iterations}
case_timeout = {timeout}
"""


def op_table(
    name: str, op: str, reference: str = "ops:ref", extra: str = "", dims: str = "N = [64, 128]"
) -> str:
    """One [[ops]] table: x = ["N"] (unless `extra` names an inputs hook, which makes the inputs)."""
    hooked = any(line.startswith("inputs =") for line in extra.splitlines())
    inputs = "" if hooked else '[ops.inputs]\nx = ["N"]\n'
    head = f'[[ops]]\nname = "{name}"\nop = "{op}"\nreference = "{reference}"\nfamily = "elementwise"\n'
    return f"\n{head}{extra}\n[ops.dims]\n{dims}\n{inputs}"


def write_project(
    root: Path, ops: str, tables: list[str], *, iterations: int = 4, timeout: float = 60
) -> Path:
    (root / "ops.py").write_text(textwrap.dedent(ops))
    config = root / "gpuemu.toml"
    config.write_text(HEADER.format(iterations=iterations, timeout=timeout) + "".join(tables))
    return config


def environment(root: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "GPUEMU_USER_CONFIG": "none", **extra}
    env.pop("GITHUB_ACTIONS", None)
    return env


def gpuemu(
    config: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`gpuemu-ci run --config CONFIG ARGS` in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "gpuemu_ci", "run", "--config", str(config), "--no-lint", *args],
        cwd=config.parent,
        env=env or environment(config.parent),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def alive(pid: int) -> bool:
    """Whether a process exists and has not exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def wait_until_dead(pids: list[int], seconds: float = 10.0) -> list[int]:
    """The pids still alive after waiting up to `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(alive(pid) for pid in pids):
            return []
        time.sleep(0.05)
    return [pid for pid in pids if alive(pid)]


def pids_in(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def drop_box(root: Path) -> Path:
    """A directory anyone may write (as /tmp): where an attacking op leaves what it did."""
    loot = root / "loot"
    loot.mkdir()
    loot.chmod(0o1777)
    return loot


def attempts_in(loot: Path) -> list[dict[str, Any]]:
    """What the attacking ops left in `loot` (one `attempt-<pid>.json` per process that tried)."""
    return [json.loads(path.read_text()) for path in sorted(loot.glob("attempt-*.json"))]
