"""The input names of an [[ops]] entry that lists none, read from the source of the op or its reference.

Upstream's `gpuemu.toml` has no `inputs` key: its ops take whatever the reference script reads. The loader runs
no user code (it may run in the process that holds the token), so the names are read statically, with `ast`:
the required parameters of the op's function (`def matmul(a, b)`), else the keys a reference reads from its
`inputs` dict (`inputs["q"]`, `inputs.get("q")`), else a reference function's own parameters. Only regular
files under the config's directory are read, after following links (a dotted module path is looked for there,
and under `src/`), and none larger than MAX_SOURCE_BYTES.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

MAX_SOURCE_BYTES = 2 << 20  # a source file larger than this is not parsed (names cannot be read from it)
SKIPPED_PARAMETERS = ("self", "cls", "ctx")  # a method's receiver, an autograd Function's context
REFERENCE_FUNCTIONS = ("reference", "run", "op")  # the functions a script may define (backends/loading.py)


@dataclass(frozen=True)
class Inferred:
    """Input names read from the op's own signature, and where they were read."""

    names: tuple[str, ...]
    source: str  # where they were read, in words: "the parameters of my_project/ops/matmul.py:matmul"


def infer_input_names(
    op_text: str, reference_text: str, op_script: str | None, op_name: str, root: Path
) -> Inferred | None:
    """The names, from the op's function, else its script, else the reference; None when none says them."""
    found = _from_target(op_text, op_name, root) if op_text else None
    if found is None and op_script:
        found = _from_target(op_script, op_name, root)
    if found is None and reference_text:
        found = _from_target(reference_text, "reference", root)
    return found


def defines_function(script: Path, name: str) -> bool:
    """Whether a script defines `name` at module level (a reference script that does can be imported and kept
    warm; one that does not only reads stdin)."""
    tree = _parse(script) if script.is_file() else None
    return tree is not None and _function(tree, name) is not None


def _from_target(text: str, default_function: str, root: Path) -> Inferred | None:
    located = _locate(text, default_function, root)
    if located is None:
        return None
    path, functions = located
    if not path.resolve().is_relative_to(root.resolve()):  # a link out of the repository is not read
        return None
    tree = _parse(path)
    if tree is None:
        return None
    shown = path.relative_to(root) if path.is_relative_to(root) else path
    for function in functions:
        node = _function(tree, function)
        if node is None:
            continue
        names = _dict_keys(node) if _takes_inputs_dict(node) else _required_parameters(node)
        if names:
            what = "the keys it reads from `inputs`" if _takes_inputs_dict(node) else "the parameters"
            return Inferred(names, f"{what} of {shown}:{function}")
    return None


def _locate(text: str, default_function: str, root: Path) -> tuple[Path, tuple[str, ...]] | None:
    """(file, functions to look for, in order) for "pkg.mod:func", "file.py[:func]" or a dotted module."""
    module, sep, function = text.partition(":")
    if module.endswith(".py") or "/" in module:
        script = (root / module).resolve()
        names = (function,) if function else (default_function, *REFERENCE_FUNCTIONS)
        return (script, names) if script.is_file() else None
    if sep:
        found = _module_file(module, root)
        return (found, (function.split(".")[-1],)) if found is not None else None
    found = _module_file(module, root)  # upstream's `module`: the function named like the op in it
    if found is not None:
        return found, (default_function,)
    parent, _, last = module.rpartition(".")  # or a dotted path to the function itself
    above = _module_file(parent, root) if parent else None
    return (above, (last,)) if above is not None else None


def _module_file(dotted: str, root: Path) -> Path | None:
    parts = dotted.split(".")
    for base in (root, root / "src"):
        for candidate in (base.joinpath(*parts).with_suffix(".py"), base.joinpath(*parts, "__init__.py")):
            if candidate.is_file():
                return candidate
    return None


def _parse(path: Path) -> ast.Module | None:
    try:
        if path.stat().st_size > MAX_SOURCE_BYTES:
            return None
        return ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError, RecursionError):
        return None


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    for node in tree.body:  # module level only: what `module:function` can name
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return node
    return None


def _positional(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    params = [*node.args.posonlyargs, *node.args.args]
    if params and params[0].arg in SKIPPED_PARAMETERS:
        params = params[1:]
    return params


def _takes_inputs_dict(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Upstream's reference convention: `reference(inputs: dict, **kwargs)`."""
    params = _positional(node)
    return len(params) == 1 and params[0].arg == "inputs" and not node.args.kwonlyargs


def _required_parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    """Parameters without a default (those with one are kwargs, not inputs)."""
    every = [*node.args.posonlyargs, *node.args.args]
    required = every[: len(every) - len(node.args.defaults)]
    if required and required[0].arg in SKIPPED_PARAMETERS:
        required = required[1:]
    keyword_only = [a for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True) if d is None]
    return tuple(a.arg for a in (*required, *keyword_only))


def _dict_keys(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    """`inputs["q"]` and `inputs.get("q")` in the function's body, in the order they appear."""
    found: list[tuple[int, int, str]] = []
    for child in ast.walk(node):
        key: ast.expr | None = None
        if isinstance(child, ast.Subscript) and _is_name(child.value, "inputs"):
            key = child.slice
        elif (
            isinstance(child, ast.Call)
            and isinstance(child.func, ast.Attribute)
            and child.func.attr == "get"
            and _is_name(child.func.value, "inputs")
            and child.args
        ):
            key = child.args[0]
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.isidentifier():
            found.append((key.lineno, key.col_offset, key.value))
    return tuple(dict.fromkeys(name for _, _, name in sorted(found)))


def _is_name(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name
