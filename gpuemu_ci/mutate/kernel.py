"""A Triton kernel's `def` in its file, with what the mutation operators ask of it: its parameters, which are
`tl.constexpr`, which statements sit in a loop, and the `tl.*` calls in it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property

from gpuemu_ci.mutate.source import SourceFile

MEMORY_CALLS = ("load", "store", "atomic_add", "atomic_max", "atomic_min", "atomic_xchg", "atomic_cas")


def tl_call(node: ast.AST, name: str | tuple[str, ...]) -> bool:
    """Whether `node` calls `tl.<name>` (`triton.language.<name>`, or any `<module>.<name>` of that spelling)."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    names = (name,) if isinstance(name, str) else name
    return node.func.attr in names and _is_language(node.func.value)


def _is_language(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in ("tl", "language")
    return isinstance(node, ast.Attribute) and node.attr == "language"


def keyword(call: ast.Call, name: str) -> ast.keyword | None:
    """The keyword argument `name` of `call`, or None when the call does not pass it by keyword."""
    return next((k for k in call.keywords if k.arg == name), None)


def pointer_base(node: ast.expr) -> str | None:
    """The leftmost name of a pointer expression (`x_ptr` in `x_ptr + row * N + cols`)."""
    while isinstance(node, ast.BinOp):
        node = node.left
    return node.id if isinstance(node, ast.Name) else None


@dataclass
class Kernel:
    """The kernel's `def` (`node`) in `source`."""

    source: SourceFile
    node: ast.FunctionDef
    _in_loop: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        for loop in ast.walk(self.node):
            if isinstance(loop, ast.For | ast.While):
                for inner in ast.walk(loop):
                    if inner is not loop:
                        self._in_loop.add(id(inner))

    @property
    def name(self) -> str:
        """The kernel function's name."""
        return self.node.name

    @cached_property
    def params(self) -> tuple[str, ...]:
        """Every parameter's name, in order (positional-only, positional, keyword-only)."""
        args = self.node.args
        return tuple(a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs))

    @cached_property
    def constexprs(self) -> tuple[str, ...]:
        """The parameters annotated `tl.constexpr`, in order."""
        args = self.node.args
        return tuple(
            a.arg
            for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)
            if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)
        )

    @cached_property
    def pointers(self) -> tuple[str, ...]:
        """Parameters used as the base of a load's or store's pointer, in parameter order."""
        bases = {pointer_base(call.args[0]) for call in self.calls(MEMORY_CALLS) if call.args}
        return tuple(p for p in self.params if p in bases)

    @cached_property
    def block_sizes(self) -> tuple[str, ...]:
        """The constexprs a block is made of (`tl.arange(0, BLOCK)`), else those named like a block size."""
        ranged = {
            call.args[1].id
            for call in self.calls("arange")
            if len(call.args) == 2 and isinstance(call.args[1], ast.Name)
        }
        named = [p for p in self.constexprs if p in ranged]
        return tuple(named or [p for p in self.constexprs if "BLOCK" in p.upper()])

    def addressing(self) -> set[int]:
        """The nodes that compute where memory is accessed or which lanes are live (pointer arguments, masks,
        comparisons, `tl.arange`): ids of them and everything in them."""
        inside: set[int] = set()
        for node in self.walk():
            roots: list[ast.AST] = []
            if tl_call(node, MEMORY_CALLS) and node.args:  # type: ignore[attr-defined]
                roots.append(node.args[0])  # type: ignore[attr-defined]
                mask = keyword(node, "mask")  # type: ignore[arg-type]
                if mask is not None:
                    roots.append(mask.value)
            elif isinstance(node, ast.Compare) or tl_call(node, "arange"):
                roots.append(node)
            for root in roots:
                inside.update(id(n) for n in ast.walk(root))
        return inside

    def in_loop(self, node: ast.AST) -> bool:
        """Whether `node` lies inside the body of a `for` or `while` loop of the kernel."""
        return id(node) in self._in_loop

    def walk(self) -> Iterator[ast.AST]:
        """Every node of the body, in source order (the decorators and the signature left out)."""
        for statement in self.node.body:
            yield from _ordered(statement)

    def calls(self, name: str | tuple[str, ...]) -> Iterator[ast.Call]:
        """Every call of `tl.<name>` (one name or any of several) in the body, in source order."""
        for node in self.walk():
            if tl_call(node, name):
                assert isinstance(node, ast.Call)
                yield node

    def text(self, node: ast.AST) -> str:
        """The exact source text of `node`."""
        return self.source.segment(node)


def _ordered(node: ast.AST) -> Iterator[ast.AST]:
    """`node` and its descendants, depth first in field order (source order for expressions and statements)."""
    yield node
    for child in ast.iter_child_nodes(node):
        yield from _ordered(child)


def find_kernel(source: SourceFile, name: str, line: int) -> Kernel | None:
    """The module-level `def name` nearest `line` (the line Python recorded for it), or None."""
    tree = ast.parse(source.text)
    defs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    if not defs:
        return None
    return Kernel(source, min(defs, key=lambda d: abs(d.lineno - line)))
