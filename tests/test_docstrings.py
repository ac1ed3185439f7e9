"""Every public definition of the covered parts of gpuemu_ci says what it is for: a docstring.

Public means what another module may call: a module-level function or class whose name does not start with an
underscore, in a module whose name does not either, and the public methods (and properties) of such a class. A
dunder method (`__init__`, `__call__`, ...) is documented by its class; an `@overload` stub by the definition it
declares. The check reads the source (ast), so it imports nothing.

`COVERED` lists the parts held to it: every part of gpuemu_ci, so a new part is documented from its first
commit. `python3 -m tests.test_docstrings` prints the coverage of every part and the
definitions that lack one (`--missing PART` lists them for one part).
"""

from __future__ import annotations

import argparse
import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gpuemu_ci"

# Parts of gpuemu_ci (a subpackage, or a top-level module without its `.py`) whose every public definition has a
# docstring: every part (#50). A new part joins the list when it is added; never remove one.
COVERED: tuple[str, ...] = (
    "__init__",
    "__main__",
    "action",
    "api",
    "attest",
    "backends",
    "calls",
    "cli",
    "clock",
    "compat",
    "config",
    "corpus",
    "diff",
    "docgen",
    "dtypes",
    "early_signals",
    "errors",
    "files",
    "fuzz",
    "github",
    "launch",
    "lint",
    "mutate",
    "onboard",
    "oracle",
    "pipeline",
    "plan",
    "progress",
    "pytest_plugin",
    "render",
    "results",
    "rng",
    "shadow",
    "terminal",
    "triton_cpu",
)


@dataclass(frozen=True)
class Definition:
    """One public definition: where it is, its dotted name within the module, and whether it has a docstring."""

    path: Path
    line: int
    name: str
    documented: bool

    @property
    def part(self) -> str:
        """The part of gpuemu_ci it belongs to: the first component below the package."""
        return part_of(self.path)

    def where(self) -> str:
        """`path:line name`, relative to the repository, for a failure message."""
        return f"{self.path.relative_to(ROOT)}:{self.line} {self.name}"


def _is_overload(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(
        (isinstance(d, ast.Name) and d.id == "overload")
        or (isinstance(d, ast.Attribute) and d.attr == "overload")
        for d in node.decorator_list
    )


def _is_setter(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    # `@x.setter` / `@x.deleter`: documented by the property's getter.
    return any(isinstance(d, ast.Attribute) and d.attr in ("setter", "deleter") for d in node.decorator_list)


def _public(name: str) -> bool:
    return not name.startswith("_")


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class _Class:
    """A class as the check sees it: its bases (as `module:Name` where they resolve inside the package) and which
    of its methods have a docstring."""

    bases: tuple[str, ...]
    methods: dict[str, bool]


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts if path.is_relative_to(ROOT) else (path.stem,)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_names(tree: ast.Module, module: str, is_package: bool) -> dict[str, str]:
    """name -> `module:Name` for every `from M import Name` of the module (relative imports resolved)."""
    names: dict[str, str] = {}
    package = module if is_package else module.rpartition(".")[0]
    # Module-level imports and those of `if TYPE_CHECKING:` blocks (where a base class is imported from).
    statements = [*tree.body, *(n for s in tree.body if isinstance(s, ast.If) for n in s.body)]
    for node in statements:
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level > 1:
                base = base[: len(base) - (node.level - 1)]
            source = ".".join([*base, node.module] if node.module else base) if node.level else node.module
            for alias in node.names:
                names[alias.asname or alias.name] = f"{source}:{alias.name}"
    return names


@functools.cache
def _parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


@functools.cache
def _classes_of(path: Path) -> dict[str, _Class]:
    tree = _parsed(path)
    module = _module_name(path)
    imported = _imported_names(tree, module, path.name == "__init__.py")
    classes: dict[str, _Class] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            bases = tuple(
                imported.get(b.id, f"{module}:{b.id}") for b in node.bases if isinstance(b, ast.Name)
            )
            methods = {
                m.name: ast.get_docstring(m) is not None for m in node.body if isinstance(m, _FUNCTIONS)
            }
            classes[f"{module}:{node.name}"] = _Class(bases, methods)
    return classes


def _class(qualified: str) -> _Class | None:
    """The class `module:Name` of the package, read from its module's source; None when it is not ours."""
    module = qualified.partition(":")[0]
    relative = Path(*module.split("."))
    for path in (ROOT / relative.with_suffix(".py"), ROOT / relative / "__init__.py"):
        if module.split(".")[0] == PACKAGE.name and path.is_file():
            return _classes_of(path).get(qualified)
    return None


def _inherits_doc(cls: _Class, method: str, seen: frozenset[str] = frozenset()) -> bool:
    # As `inspect.getdoc` does: an override without a docstring takes its base's (the contract it implements).
    for name in cls.bases:
        base = _class(name) if name not in seen else None
        if base is not None and (base.methods.get(method) or _inherits_doc(base, method, seen | {name})):
            return True
    return False


def definitions_in(path: Path) -> Iterator[Definition]:
    """The public definitions of one module: module-level functions and classes, and the public methods of
    those classes. A method without a docstring that overrides a documented method of a base class in the
    package counts as documented."""
    tree = _parsed(path)
    classes = _classes_of(path)
    module = _module_name(path)
    for node in tree.body:
        if isinstance(node, _FUNCTIONS) and _public(node.name) and not _is_overload(node):
            yield Definition(path, node.lineno, node.name, ast.get_docstring(node) is not None)
        elif isinstance(node, ast.ClassDef) and _public(node.name):
            yield Definition(path, node.lineno, node.name, ast.get_docstring(node) is not None)
            for member in node.body:
                if (
                    isinstance(member, _FUNCTIONS)
                    and _public(member.name)
                    and not _is_overload(member)
                    and not _is_setter(member)
                ):
                    documented = ast.get_docstring(member) is not None or _inherits_doc(
                        classes[f"{module}:{node.name}"], member.name
                    )
                    yield Definition(path, member.lineno, f"{node.name}.{member.name}", documented)


def public_modules() -> Iterator[Path]:
    """Every module of gpuemu_ci whose dotted name has no private (underscore-prefixed) component; packages'
    `__init__.py` and `__main__.py` count as public."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if any(p.startswith("_") and p not in ("__init__", "__main__") for p in parts):
            continue
        yield path


@functools.cache
def all_definitions() -> list[Definition]:
    """Every public definition of gpuemu_ci, in file order (read once per process)."""
    return [d for path in public_modules() for d in definitions_in(path)]


def part_of(path: Path) -> str:
    """The part of gpuemu_ci a module belongs to: the first component below the package."""
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def coverage_by_part(definitions: list[Definition]) -> dict[str, tuple[int, int]]:
    """part -> (documented, total)."""
    table: dict[str, tuple[int, int]] = {}
    for d in definitions:
        documented, total = table.get(d.part, (0, 0))
        table[d.part] = (documented + d.documented, total + 1)
    return table


@pytest.mark.slow  # parses every covered module: 1.5 s of CPU
def test_every_public_definition_of_a_covered_part_has_a_docstring() -> None:
    covered = [path for path in public_modules() if part_of(path) in COVERED]
    missing = [d.where() for path in covered for d in definitions_in(path) if not d.documented]
    assert not missing, (
        f"{len(missing)} public definitions in parts listed in tests/test_docstrings.py::COVERED lack a "
        "docstring (say what it is for and what a caller must know):\n  " + "\n  ".join(missing)
    )


def test_every_part_is_covered() -> None:
    # Every part reached 100% (#50): a new part is held to it from its first commit.
    parts = {part_of(path) for path in public_modules()}
    assert not parts - set(COVERED), f"add {sorted(parts - set(COVERED))} to COVERED (and document them)"


def test_every_covered_part_exists() -> None:
    parts = {part_of(path) for path in public_modules()}
    assert not set(COVERED) - parts, f"COVERED names parts that are not in gpuemu_ci: {set(COVERED) - parts}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def f(): pass\n", [("f", False)]),
        ('def f():\n    """Does it."""\n', [("f", True)]),
        ("def _f(): pass\n", []),
        (
            'class C:\n    """A thing."""\n    def m(self): pass\n'
            "    def _p(self): pass\n    def __init__(self): pass\n",
            [("C", True), ("C.m", False)],
        ),
        ("class _C:\n    def m(self): pass\n", []),
        (
            "from typing import overload\n@overload\ndef f(x: int) -> int: ...\n"
            'def f(x):\n    """Either."""\n',
            [("f", True)],
        ),
        (
            'class C:\n    """A thing."""\n    @property\n    def x(self):\n        """The x."""\n'
            "    @x.setter\n    def x(self, v): pass\n",
            [("C", True), ("C.x", True)],
        ),
    ],
)
def test_what_counts_as_a_public_definition(
    tmp_path: Path, source: str, expected: list[tuple[str, bool]]
) -> None:
    module = tmp_path / "module.py"
    module.write_text(source, encoding="utf-8")
    assert [(d.name, d.documented) for d in definitions_in(module)] == expected


def main() -> None:
    """Prints each part's docstring coverage (and the total), or the undocumented definitions of one part."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument(
        "--missing", metavar="PART", help="list the definitions of PART that lack a docstring"
    )
    args = parser.parse_args()
    definitions = all_definitions()
    if args.missing:
        for d in definitions:
            if d.part == args.missing and not d.documented:
                print(d.where())
        return
    table = coverage_by_part(definitions)
    for part, (documented, total) in sorted(table.items()):
        mark = "covered" if part in COVERED else ""
        print(f"{part:16} {documented:5}/{total:<5} {100 * documented / total:6.1f}%  {mark}")
    documented = sum(d.documented for d in definitions)
    print(f"{'all':16} {documented:5}/{len(definitions):<5} {100 * documented / len(definitions):6.1f}%")


if __name__ == "__main__":
    main()
