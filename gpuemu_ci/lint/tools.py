"""Running the compilers and tools lint reads: with a time limit, their whole process group killed on
timeout, and never an exception for a tool that cannot start."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Mapping, Sequence

from gpuemu_ci.launch import run_command


def output_of(cmd: Sequence[str], env: Mapping[str, str]) -> str | None:
    """A tool's stdout and stderr when it exits 0 within a minute, else None (not found, failed or hung)."""
    try:
        proc = subprocess.run(
            list(cmd), capture_output=True, text=True, timeout=60, check=False, env=dict(env)
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout + proc.stderr if proc.returncode == 0 else None


def run_tool(
    cmd: Sequence[str], timeout: float, stop: threading.Event | None = None
) -> tuple[int, str, str, bool]:
    """(returncode, stdout, stderr, timed_out). On timeout, or once `stop` is set, the whole process group goes:
    nvcc's children (cicc, ptxas) would otherwise keep running after nvcc itself is killed."""
    try:
        done = run_command(cmd, timeout, stop)
    except OSError as exc:
        return -1, "", f"could not start {cmd[0]}: {exc}", False
    return done.returncode, done.stdout, done.stderr, done.timed_out
