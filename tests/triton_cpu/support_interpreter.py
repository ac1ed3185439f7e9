"""Running a test's Triton kernels in Triton's real interpreter: TRITON_INTERPRET=1 must be set before Triton is
imported, so each test module's script runs in a subprocess and prints one JSON line of what it saw."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def checkout_env(**extra: str) -> dict[str, str]:
    """This process's environment with the checkout first on PYTHONPATH, keeping what was there (a Triton
    installed elsewhere, to run these tests against another Triton release)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return {**os.environ, **extra, "PYTHONPATH": path}


def run_interpreted(script: str, directory: Path) -> dict:
    """Runs `script` (written to `directory`) in a fresh interpreter with TRITON_INTERPRET=1 and this checkout on
    PYTHONPATH; its last stdout line, parsed as JSON."""
    path = directory / "kernels.py"
    path.write_text(script)
    env = checkout_env(TRITON_INTERPRET="1")
    done = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def gpuemu(*args: str, cwd: Path, first_on_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`gpuemu-ci ARGS` as a user's shell runs it (real worker processes), with this checkout's package;
    `first_on_path` goes before it on PYTHONPATH (a `sitecustomize` the workers' interpreter loads)."""
    env = checkout_env()
    if first_on_path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(first_on_path), env["PYTHONPATH"]])
    return subprocess.run(
        [sys.executable, "-m", "gpuemu_ci", *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=1200, check=False,
    )  # fmt: skip


def replayed_where(config: Path, op: str, seed: int, cwd: Path) -> str:
    """The "where" `gpuemu-ci replay --explain` prints for a failing case (its shadow follows every program)."""
    replayed = gpuemu(
        "replay", "--config", str(config), "--op", op, "--seed", str(seed), "--explain", "--out", "replayed",
        cwd=cwd,
    )  # fmt: skip
    assert replayed.returncode == 1, replayed.stderr
    said = next(x for x in (replayed.stdout + replayed.stderr).splitlines() if "where in the kernel:" in x)
    return said.split("where in the kernel: ", 1)[1]
