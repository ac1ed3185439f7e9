"""Starting other processes: how many cores they may share, the environment that makes this very gpuemu-ci
importable in another Python process (a worker, the Action's gate), and running a tool (a compiler, nvidia-smi)
so that a timeout or a signal stops it at once."""

from __future__ import annotations

import contextlib
import os
import signal
import site
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import gpuemu_ci

# How a Python process gpuemu-ci starts runs a module: `-P` keeps its working directory (the workspace: code
# under test) off sys.path, so that no `gpuemu_ci/`, `numpy/` or `jinja2/` there is imported instead of the tool's.
PYTHON_FLAGS = ("-P",)


def available_cores() -> int:
    """The cores this process may use: its CPU affinity, capped by a cgroup v2 CPU quota (containers)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, int(int(quota) / int(period) + 0.5)))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def python_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env`, with PYTHONPATH made independent of the working directory, plus this package's parent directory
    first on it when it is not installed in site-packages (a source checkout run without installing); an
    installed package is already on the path, and putting site-packages first could shadow the standard
    library."""
    result = dict(env)
    entries = _absolute_entries(result.get("PYTHONPATH", ""))
    package_parent = Path(gpuemu_ci.__file__).resolve().parent.parent
    site_dirs = {Path(p).resolve() for p in (*site.getsitepackages(), site.getusersitepackages())}
    if package_parent not in site_dirs:
        entries.insert(0, str(package_parent))
    if entries:
        result["PYTHONPATH"] = os.pathsep.join(entries)
    else:
        result.pop("PYTHONPATH", None)
    return result


def _absolute_entries(pythonpath: str) -> list[str]:
    """PYTHONPATH's entries, each absolute as this process sees it. An empty entry (a stray `:`, common in CI
    scripts) would put the started process's working directory first on sys.path even under `-P`, so it is
    dropped; a relative one would name a directory relative to that process's working directory, not this one's."""
    return [os.path.abspath(entry) for entry in pythonpath.split(os.pathsep) if entry]


def keep_working_directory_off_path() -> None:
    """In a gpuemu-ci process itself: take its working directory (often the workspace) off sys.path, where
    `python -m gpuemu_ci` puts it first and a stray `:` in PYTHONPATH puts it even under -P, so that no
    `numpy/` or `jinja2/` there is imported in place of what the tool imports from now on. The tool imports no
    user code through it: the workers import that from the config's directory (backends/import_order.py)."""
    try:
        here = os.getcwd()
    except OSError:  # a working directory that was removed: nothing to take off
        return
    sys.path[:] = [entry for entry in sys.path if entry not in ("", here)]


STOP_POLL_S = 0.05  # how often a running command looks whether it was asked to stop


@dataclass(frozen=True)
class Finished:
    """How a command ended: its exit code and output; `timed_out` or `stopped` when it was killed for that."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False
    stopped: bool = False


def run_command(
    command: Sequence[str],
    timeout_s: float,
    stop: threading.Event | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> Finished:
    """Run `command` (stdin closed, output captured as text) in a session of its own, and kill its whole process
    group when it runs past `timeout_s` or once `stop` is set (a signal stops the gate within a second or two,
    whatever tool runs then: a compiler's own children, cicc and ptxas, go too). OSError when it cannot start."""
    proc = subprocess.Popen(
        list(command),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        env=None if env is None else dict(env),
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            out, err = proc.communicate(timeout=min(STOP_POLL_S, max(0.0, deadline - time.monotonic())))
            return Finished(proc.returncode, out, err)
        except subprocess.TimeoutExpired:
            stopped = stop is not None and stop.is_set()
            if stopped or time.monotonic() >= deadline:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                out, err = proc.communicate()
                return Finished(-1, out or "", err or "", timed_out=not stopped, stopped=stopped)
