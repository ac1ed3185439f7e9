"""Loading a bench script (bench/*.py, not a package) as a module, as `python bench/<script>.py` runs it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_script(script: Path, name: str) -> ModuleType:
    sys.path.insert(0, str(script.parent))  # as `python bench/<script>.py` has it (its sibling modules)
    spec = importlib.util.spec_from_file_location(name, script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while they are built
    spec.loader.exec_module(module)
    return module
