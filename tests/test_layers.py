"""The package's layers: which part of gpuemu_ci may import which, checked against every import in the code.

Data flows one way (config -> plan -> fuzz -> backends -> oracle -> results -> diff -> publish); imports point
the same way, from the code that orchestrates a stage down to what it builds on. `LAYERS` orders the parts
from the bottom up, `ALLOWED` lists every edge the code has (each pointing to a lower layer), and `EXCEPTIONS`
the few that do not, each with the reason it exists. Module-level imports, imports inside functions and
`TYPE_CHECKING` blocks, and module names spelt out in strings (`importlib.import_module`, `python -m ...`)
all count: a lazy import is still a dependency.

ARCHITECTURE.md carries the same table and diagram; `python3 -m tests.test_layers` prints both, generated
from this file, to paste there after a change.
"""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gpuemu_ci"
ARCHITECTURE = ROOT / "ARCHITECTURE.md"

# The root package `gpuemu_ci` itself (`__version__`, and the `gpuemu_ci.check` forwarder).
TOP = "gpuemu_ci"

# Bottom first. A part may import only parts of lower layers; parts of one layer never import each other.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", (TOP, "errors", "clock", "terminal", "dtypes", "rng", "calls", "triton_cpu", "early_signals")),
    ("settings", ("config", "files", "launch", "progress")),
    ("model", ("plan", "results")),
    ("stages", ("fuzz", "lint", "diff", "corpus", "onboard")),
    ("judging", ("oracle",)),
    ("execution and rendering", ("backends", "render")),
    ("orchestration and GitHub", ("pipeline", "github")),
    ("library entry points and signing", ("api", "shadow", "attest", "mutate")),
    ("the Action, the pytest plugin and upstream's API", ("action", "pytest_plugin", "compat")),
    ("the command line", ("cli",)),
    ("python -m entry points: gpuemu_ci, gpuemu_ci.docgen", ("__main__", "docgen")),
)

# Every edge the code has, importer -> what it may import.
ALLOWED: dict[str, frozenset[str]] = {
    name: frozenset(edges.split())
    for name, edges in {
        TOP: "",
        "errors": "",
        "clock": "",
        "terminal": "",
        "dtypes": "",
        "rng": "",
        "calls": "",
        "triton_cpu": "",
        "early_signals": "",
        "config": "errors dtypes",
        "files": "errors",
        "launch": TOP,
        "progress": "terminal",
        "plan": "config rng",
        "results": "errors files",
        "fuzz": "config dtypes errors plan results rng",
        "oracle": "calls config dtypes fuzz plan results rng triton_cpu",
        "lint": "config errors launch results",
        "diff": "config errors files results",
        "corpus": "config errors plan results",
        "onboard": "dtypes errors",
        "backends": "calls config dtypes errors fuzz launch oracle plan results rng triton_cpu",
        "render": "errors files results terminal",
        "pipeline": f"{TOP} backends calls clock config corpus diff dtypes early_signals errors files fuzz launch lint "
        "oracle plan progress results",
        "github": f"{TOP} errors render results",
        "api": "backends config errors pipeline plan render results",
        "shadow": f"{TOP} backends calls clock config dtypes errors fuzz oracle pipeline plan results",
        "attest": f"{TOP} clock errors files github results",
        "mutate": f"{TOP} backends calls clock config errors files fuzz lint pipeline plan progress results",
        "action": f"{TOP} attest clock config diff early_signals errors files fuzz github launch pipeline progress "
        "render results",
        "pytest_plugin": "api config errors onboard",
        "compat": f"{TOP} api config dtypes diff errors fuzz pipeline plan results shadow",
        "cli": f"{TOP} action api attest backends clock config corpus diff dtypes early_signals errors files launch "
        "lint mutate onboard oracle pipeline progress render results",
        "__main__": "cli early_signals launch",
        "docgen": "config",
    }.items()
}

# Edges against the layers, each with why it is there. Nothing else may point up.
EXCEPTIONS: dict[tuple[str, str], str] = {
    (TOP, "api"): "`gpuemu_ci.check`, the public entry point, forwards to `api.check` (imported on call)",
}

MODULE_IN_STRING = re.compile(r"gpuemu_ci(?:\.\w+)+")


@dataclass(frozen=True)
class Import:
    """One import of another part of gpuemu_ci: where it is and what it names."""

    path: Path
    line: int
    source: str  # the importing part
    target: str  # the imported part
    module: str  # the module named

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def part_of(module: str) -> str:
    """`gpuemu_ci.backends.pool` -> `backends`; `gpuemu_ci.api` -> `api`; `gpuemu_ci` -> the root package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else TOP


def module_name(path: Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


def is_module(name: str) -> bool:
    """Whether `gpuemu_ci.x.y` is a module or package of this source tree (not an attribute of one)."""
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imported_modules(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The gpuemu_ci modules an import statement names; `from gpuemu_ci import x` names `gpuemu_ci.x` when x is
    a module of its own, and the root package otherwise (`__version__`)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative: resolved against the importing module's package
        package = module.split(".") if is_package else module.split(".")[:-1]
        anchor = package[: len(package) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    names = []
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        names.append(submodule if is_module(submodule) else base)
    return names


def string_modules(node: ast.AST) -> list[str]:
    """Module names spelt out in a string constant: `importlib.import_module("gpuemu_ci.x")`, `-m gpuemu_ci.y`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        match = MODULE_IN_STRING.fullmatch(node.value)
        if match and is_module(node.value):
            return [node.value]
    return []


@functools.cache
def package_imports() -> tuple[Import, ...]:
    """Every import of another part, in every module of gpuemu_ci, wherever in the module it is."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        source = part_of(module)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            named = imported_modules(node, module, path.name == "__init__.py") + string_modules(node)
            for target_module in named:
                if target_module.split(".")[0] != TOP:
                    continue
                target = part_of(target_module)
                if target != source:
                    found.append(Import(path, getattr(node, "lineno", 0), source, target, target_module))
    return tuple(dict.fromkeys(found))  # `from m import a, b` is one import of m


def layer_of() -> dict[str, int]:
    return {part: level for level, (_, parts) in enumerate(LAYERS) for part in parts}


def parts_on_disk() -> set[str]:
    """The parts of gpuemu_ci: its subpackages and top-level modules."""
    parts = {TOP}
    for entry in PACKAGE.iterdir():
        if entry.is_dir() and (entry / "__init__.py").is_file():
            parts.add(entry.name)
        elif entry.suffix == ".py" and entry.name != "__init__.py":
            parts.add(entry.stem)
    return parts


def test_every_part_of_the_package_has_a_layer() -> None:
    placed = layer_of()
    assert sum(len(parts) for _, parts in LAYERS) == len(placed), "a part is in two layers"
    assert set(placed) == parts_on_disk(), (
        f"not placed in LAYERS: {sorted(parts_on_disk() - set(placed))}; "
        f"placed but not in gpuemu_ci/: {sorted(set(placed) - parts_on_disk())}"
    )
    assert set(ALLOWED) == set(placed), "ALLOWED needs one row per part, even with no edges"


def test_the_table_points_down_the_layers() -> None:
    level = layer_of()
    upward = [
        f"{source} (layer {level[source]}) -> {target} (layer {level[target]})"
        for source, targets in ALLOWED.items()
        for target in sorted(targets)
        if level[target] >= level[source]
    ]
    assert not upward, "ALLOWED edges must point to a lower layer (or be an EXCEPTION with a reason):\n" + (
        "\n".join(upward)
    )
    assert not set(EXCEPTIONS) & {(s, t) for s, targets in ALLOWED.items() for t in targets}
    assert all(reason.strip() for reason in EXCEPTIONS.values())


@pytest.mark.slow  # parses every module of the package: 1.2 s of CPU
def test_no_import_outside_the_table() -> None:
    allowed = {(source, target) for source, targets in ALLOWED.items() for target in targets} | set(
        EXCEPTIONS
    )
    stray = [
        f"{imp.where()}: {imp.module} is imported by {imp.source}: edge {imp.source} -> {imp.target} is not in "
        "tests/test_layers.py's table"
        for imp in package_imports()
        if (imp.source, imp.target) not in allowed
    ]
    assert not stray, (
        "imports against the layers (move the code to the layer it belongs to, or add the edge to ALLOWED when "
        "it points down, to EXCEPTIONS with a reason when it cannot):\n" + "\n".join(stray)
    )


def test_every_edge_in_the_table_is_used() -> None:
    used = {(imp.source, imp.target) for imp in package_imports()}
    listed = {(source, target) for source, targets in ALLOWED.items() for target in targets} | set(EXCEPTIONS)
    stale = sorted(listed - used)
    assert not stale, (
        "edges in tests/test_layers.py that no import uses any more: remove them there and in ARCHITECTURE.md "
        "(python3 -m tests.test_layers prints the new text):\n" + "\n".join(f"{s} -> {t}" for s, t in stale)
    )


def test_the_import_finder_sees_lazy_relative_and_string_imports(tmp_path: Path) -> None:
    """The checker itself: an import inside a function, a relative import and a module named in a string are
    all found, with their lines."""
    module = "gpuemu_ci.render.example"
    source = (
        "from . import text\n"
        "def f():\n"
        "    from gpuemu_ci.pipeline.gate import run_gate\n"
        "    import gpuemu_ci.cli.main\n"
        "    return 'gpuemu_ci.action.gate_process'\n"
        "from gpuemu_ci import __version__\n"
    )
    found = []
    for node in ast.walk(ast.parse(source)):
        for name in imported_modules(node, module, is_package=False) + string_modules(node):
            found.append((getattr(node, "lineno", None), name))
    assert sorted(found, key=str) == sorted(
        [
            (1, "gpuemu_ci.render.text"),
            (3, "gpuemu_ci.pipeline.gate"),
            (4, "gpuemu_ci.cli.main"),
            (5, "gpuemu_ci.action.gate_process"),
            (6, "gpuemu_ci"),
        ],
        key=str,
    )


# ARCHITECTURE.md: the layers and edges, generated from the table above and checked against it.

BEGIN, END = "<!-- layers: generated by tests/test_layers.py -->", "<!-- layers: end -->"


def rendered_layers() -> str:
    """The layer table: one row per part, top layer first, with what it may import (highest layer first)."""
    level = layer_of()
    lines = [
        "| layer | part of `gpuemu_ci` | imports |",
        "|---|---|---|",
    ]
    for index, (title, parts) in reversed(list(enumerate(LAYERS))):
        for part in parts:
            targets = [f"`{t}`" for t in sorted(ALLOWED[part], key=lambda t: (-level[t], t))]
            targets += [f"`{t}` (exception: {why})" for (s, t), why in EXCEPTIONS.items() if s == part]
            lines.append(f"| {index} {title} | `{part}` | {', '.join(targets) or '(nothing)'} |")
    return "\n".join(lines)


def reachable(source: str, skip: tuple[str, str] | None = None) -> set[str]:
    """The parts `source` reaches through ALLOWED, without the edge `skip`."""
    seen: set[str] = set()
    todo = [source]
    while todo:
        part = todo.pop()
        for target in ALLOWED[part]:
            if (part, target) != skip and target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def rendered_diagram() -> str:
    """A Mermaid diagram of the layers, each part in its layer, with the edges no other path implies (so an
    arrow means a direct import, and every import follows arrows) and the exceptions dashed; the table below it
    lists every direct edge."""
    lines = ["```mermaid", "flowchart TB"]
    for index, (title, parts) in enumerate(LAYERS):
        lines.append(f'  subgraph L{index}["{index} {title}"]')
        lines.extend(f'    {node_id(part)}["{part}"]' for part in parts)
        lines.append("  end")
    for source in sorted(ALLOWED):
        for target in sorted(ALLOWED[source]):
            if target not in reachable(source, skip=(source, target)):
                lines.append(f"  {node_id(source)} --> {node_id(target)}")
    for (source, target), _ in sorted(EXCEPTIONS.items()):
        lines.append(f"  {node_id(source)} -.-> {node_id(target)}")
    lines.append("```")
    return "\n".join(lines)


def node_id(part: str) -> str:
    return "pkg_" + part.strip("_")


def rendered_section() -> str:
    return "\n\n".join([BEGIN, rendered_diagram(), rendered_layers(), END])


def generated_section_of(text: str) -> str:
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        pytest.fail(f"ARCHITECTURE.md has no section between {BEGIN!r} and {END!r}")
    return text[start : end + len(END)]


def test_architecture_md_shows_this_table() -> None:
    documented = generated_section_of(ARCHITECTURE.read_text(encoding="utf-8"))
    assert documented == rendered_section(), (
        "ARCHITECTURE.md's layers differ from tests/test_layers.py: paste the output of "
        "`python3 -m tests.test_layers` between its markers"
    )


def edges_by_source() -> dict[str, list[Import]]:
    """For reading: the imports behind each edge (`python3 -m tests.test_layers --edges`)."""
    edges: dict[str, list[Import]] = defaultdict(list)
    for imp in package_imports():
        edges[f"{imp.source} -> {imp.target}"].append(imp)
    return edges


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--edges"]:
        for edge, imports in sorted(edges_by_source().items()):
            print(edge, " ".join(imp.where() for imp in imports))
    else:
        print(rendered_section())
