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
