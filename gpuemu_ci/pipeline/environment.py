"""Where the run happened: interpreter, NumPy, platform, GPU, git commit."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np


def environment(gpu: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
        "executable": Path(sys.executable).name,
        "gpu": gpu,
    }


def git_info(root: Path) -> dict[str, Any] | None:
    """The tested commit: GITHUB_SHA in Actions, else `git rev-parse HEAD` in the config's repository."""
    sha = os.environ.get("GITHUB_SHA")
    ref = os.environ.get("GITHUB_REF")
    if not sha:
        try:
            sha = subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None
    if not sha:
        return None
    return {"commit": sha, "ref": ref}
