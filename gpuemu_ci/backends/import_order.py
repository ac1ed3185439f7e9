"""The user's directory on sys.path without letting it stand in for the tool.

User code is imported with the config's directory (and a script's) on sys.path, first, as documented: a
`kernels/` package there is the one tested even when a stale copy of it is installed in the environment. But
a `gpuemu_ci/`, `numpy/` or `jinja2/` folder there must never be imported instead of the tool or one of its
dependencies. So a finder placed before Python's own resolves the top-level names of the tool's packages (its
dependencies, the array frameworks it hands tensors to, the standard library) on sys.path without the user's
directories; every other name is found as before, the user's directories first. Worker processes also start
with `-P` (launch.PYTHON_FLAGS), so their working directory is not on sys.path at all.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec, PathFinder
from types import ModuleType

# The top-level modules of gpuemu-ci and of everything it requires (pyproject.toml's dependencies and theirs;
# tests/backends/test_import_order.py checks this against the installed metadata), and of the optional array
# frameworks its bridges import.
TOOL_PACKAGES = frozenset(
    {
        "gpuemu_ci",
        # dependencies, with theirs
        "numpy", "ml_dtypes", "click", "yaml", "_yaml", "jinja2", "markupsafe", "cryptography", "cffi",
        "_cffi_backend", "pycparser", "httpx", "httpcore", "h11", "anyio", "sniffio", "idna", "certifi",
        "msgspec", "rfc8785", "typing_extensions",
        # optional frameworks
        "torch", "torchgen", "functorch", "jax", "jaxlib", "triton", "cupy", "cupyx", "cupy_backends",
    }
)  # fmt: skip


def is_tool_package(name: str) -> bool:
    """Whether a top-level module name belongs to the tool or what it runs on (the standard library included)."""
    return name in TOOL_PACKAGES or name in sys.stdlib_module_names


class ToolFirst(MetaPathFinder):
    """Finds the tool's top-level packages outside the user's directories (see the module docstring)."""

    def __init__(self) -> None:
        self.user_dirs: set[str] = set()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        """Finds a top-level package that gpuemu-ci or its dependencies use outside the user's directories
        first, so a user's file named like one (`numpy.py`) cannot replace it; anything else is left to the
        other finders (None)."""
        if path is not None or not is_tool_package(fullname) or not self.user_dirs:
            return None  # a submodule (found through its package), or a name that is the user's to define
        outside = [entry for entry in sys.path if entry not in self.user_dirs]
        # None: not installed at all; then the user's directories may provide it, as before.
        return PathFinder.find_spec(fullname, outside, target)


_FINDER = ToolFirst()


def add_user_dir(directory: str) -> None:
    """Put `directory` first on sys.path for the user's modules, the tool's packages still resolving elsewhere."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    _FINDER.user_dirs.add(directory)
    if directory not in sys.path:
        sys.path.insert(0, directory)
