"""Starting another Python process that runs gpuemu-ci (a worker, the Action's gate): the environment that makes
this very gpuemu-ci importable there."""

from __future__ import annotations

import os
import site
from collections.abc import Mapping
from pathlib import Path

import gpuemu_ci


def python_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env`, plus this package's parent directory on PYTHONPATH when it is not installed in site-packages (a
    source checkout run without installing); an installed package is already on the path, and putting
    site-packages first could shadow the standard library."""
    result = dict(env)
    package_parent = Path(gpuemu_ci.__file__).resolve().parent.parent
    site_dirs = {Path(p).resolve() for p in (*site.getsitepackages(), site.getusersitepackages())}
    if package_parent not in site_dirs:
        result["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(package_parent), result.get("PYTHONPATH", "")) if p
        )
    return result
