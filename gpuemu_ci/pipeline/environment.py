"""Where the run happened: interpreter, NumPy, platform, GPU, git commit."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

from gpuemu_ci.results.model import Environment, GitInfo, GpuInfo


def environment(gpu: GpuInfo | None) -> Environment:
    """The environment results record: Python and NumPy versions, platform, interpreter name, and `gpu` (None
    without one)."""
    return Environment(
        python=platform.python_version(),
        numpy=np.__version__,
        platform=platform.platform(),
        executable=Path(sys.executable).name,
        gpu=gpu,
    )


def git_info(root: Path) -> GitInfo | None:
    """The checked-out commit of the config's repository (`git rev-parse HEAD`); None outside a repository.
    In the Action, the commit the run tested (a pull request's head) is `run.commit`."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD", "--symbolic-full-name", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.split()
    if not lines:
        return None
    ref = lines[1] if len(lines) > 1 and lines[1] != "HEAD" else None
    return GitInfo(commit=lines[0], ref=ref)
