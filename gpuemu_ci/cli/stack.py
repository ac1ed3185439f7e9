"""What `gpuemu-ci init` finds the repository's kernels written in (torch, Triton), and the Action's `setup:`
step that installs it: the Action's image has NumPy and CuPy but neither torch nor Triton, so a gate whose ops
import them would fail to import every op without that step.

Detection reads the Python sources under the target (never runs them): an `import torch` / `from torch ...`
makes it torch, an `import triton` or a `@triton.jit` kernel makes it Triton (which runs on torch tensors, so
it installs torch too). Files that do not parse (a syntax error, another encoding) are read as text for the same
statements, so one broken file does not hide the stack.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

# Folders that hold other people's code or generated files, never the repository's kernels.
SKIPPED_DIRS = frozenset(
    {"node_modules", "site-packages", "dist-packages", "build", "dist", "__pycache__", "gpuemu-out"}
)
MAX_FILES = 5000  # a checkout with more Python files than this is scanned in part, and says so
MAX_FILE_BYTES = 2_000_000  # larger .py files are generated data, not kernels
# The CPU wheels: a hosted runner has no GPU, and the default torch wheel pulls ~3 GB of CUDA libraries.
CPU_WHEELS = "https://download.pytorch.org/whl/cpu"

_TORCH_TEXT = re.compile(r"^\s*(?:import\s+torch\b|from\s+torch\b)", re.M)
_TRITON_TEXT = re.compile(r"^\s*(?:import\s+triton\b|from\s+triton\b|@triton\.(?:jit|autotune)\b)", re.M)


@dataclass(frozen=True)
class Stack:
    """The frameworks found, with the first file (relative to the target) that showed each (torch: a file that
    imports it; Triton's kernels launch on torch tensors, so `packages` has torch whenever Triton is found)."""

    torch: PurePosixPath | None = None
    triton: PurePosixPath | None = None
    truncated: bool = False  # MAX_FILES was reached

    @property
    def needs_setup(self) -> bool:
        """Whether the project needs packages installed before the gate can run (torch or Triton was
        found)."""
        return self.torch is not None or self.triton is not None

    def packages(self) -> tuple[str, ...]:
        """The packages to install, in install order (torch comes with Triton)."""
        return (
            ("torch", "triton") if self.triton is not None else ("torch",) if self.torch is not None else ()
        )

    def setup_command(self) -> str:
        """The `pip install` the Action's `setup:` input runs ("" when nothing is needed)."""
        if not self.needs_setup:
            return ""
        return f"pip install --extra-index-url {CPU_WHEELS} " + " ".join(self.packages())

    def describe(self) -> str:
        """The frameworks found, in words, each with the file that showed it (empty when none was)."""
        found = []
        if self.torch is not None:
            found.append(f"torch (imported in {self.torch})")
        if self.triton is not None:
            found.append(f"Triton (in {self.triton})")
        return " and ".join(found)


def detect_stack(target: Path, *, ignore: frozenset[PurePosixPath] = frozenset()) -> Stack:
    """Scan the Python files under `target` (hidden folders, virtual environments and `ignore` left out)."""
    torch: PurePosixPath | None = None
    triton: PurePosixPath | None = None
    seen = 0
    for path in _python_files(target):
        relative = PurePosixPath(path.relative_to(target).as_posix())
        if relative in ignore:
            continue
        seen += 1
        if seen > MAX_FILES:
            return Stack(torch, triton, truncated=True)
        uses_torch, uses_triton = _imports(path)
        if uses_triton and triton is None:
            triton = relative
        if uses_torch and torch is None:
            torch = relative
        if torch is not None and triton is not None:
            break
    return Stack(torch, triton)


def _python_files(target: Path) -> list[Path]:
    found: list[Path] = []
    if not target.is_dir():
        return found
    stack = [target]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(folder.iterdir(), key=lambda p: p.name)
        except OSError:
            continue  # unreadable folder: not ours to judge
        for entry in entries:
            if entry.is_symlink():
                continue  # a link may lead out of the repository
            if entry.is_dir():
                if not entry.name.startswith(".") and entry.name not in SKIPPED_DIRS and not _is_venv(entry):
                    stack.append(entry)
            elif entry.suffix == ".py" and entry.is_file():
                found.append(entry)
    return sorted(found)


def _is_venv(folder: Path) -> bool:
    return (folder / "pyvenv.cfg").is_file()


def _imports(path: Path) -> tuple[bool, bool]:
    """(imports torch, imports Triton or defines a @triton.jit kernel)."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return False, False
        data = path.read_bytes()
    except OSError:
        return False, False
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        text = data.decode("utf-8", errors="replace")
        return _TORCH_TEXT.search(text) is not None, _TRITON_TEXT.search(text) is not None
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module.split(".")[0])
    return "torch" in modules, "triton" in modules


def with_setup(content: bytes, stack: Stack) -> bytes:
    """A workflow template with the `setup:` input added to every gpuemu/action step that runs the ops
    (modes gate, baseline and nightly); other workflows come back unchanged."""
    if not stack.needs_setup:
        return content
    lines = content.decode("utf-8").splitlines(keepends=True)
    out: list[str] = []
    for line in lines:
        out.append(line)
        match = re.fullmatch(r"(\s+)mode: (gate|baseline|nightly)\s*\n?", line)
        if match is None:
            continue
        indent = match.group(1)
        out.append(f"{indent}# `gpuemu-ci init` found {stack.describe()}.\n")
        out.append(
            f"{indent}# The action's image lacks them: installed from the CPU wheels (pin your versions).\n"
        )
        out.append(f"{indent}setup: {stack.setup_command()}\n")
    return "".join(out).encode("utf-8")
