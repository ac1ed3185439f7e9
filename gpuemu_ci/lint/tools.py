"""Running the compilers and tools lint reads: with a time limit, their whole process group killed on
timeout, and never an exception for a tool that cannot start."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence


def output_of(cmd: Sequence[str], env: Mapping[str, str]) -> str | None:
    try:
        proc = subprocess.run(
            list(cmd), capture_output=True, text=True, timeout=60, check=False, env=dict(env)
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout + proc.stderr if proc.returncode == 0 else None


def run_tool(cmd: Sequence[str], timeout: float) -> tuple[int, str, str, bool]:
    """(returncode, stdout, stderr, timed_out). On timeout the whole process group goes: nvcc's children
    (cicc, ptxas) would otherwise keep running after nvcc itself is killed."""
    try:
        proc = subprocess.Popen(
            list(cmd),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,
        )
    except OSError as exc:
        return -1, "", f"could not start {cmd[0]}: {exc}", False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if hasattr(os, "killpg"):
                os.killpg(proc.pid, signal.SIGKILL)
            else:  # pragma: no cover - not POSIX
                proc.kill()
        out, err = proc.communicate()
        return -1, out, err, True
    return proc.returncode, out, err, False
