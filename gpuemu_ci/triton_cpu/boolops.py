"""Python `and` / `or` on Triton tensors, as the GPU compiler reads them.

Triton's code generator turns `a and b` on tensors into an elementwise logical and (with a deprecation
warning). The interpreter runs the kernel as Python, where `and` asks `bool(a)`: for a block that is always
true, so `m_mask and n_mask` is just `n_mask`, rows past M are read and written, and a correct kernel reads
out of bounds. The kernel's source is rewritten (the interpreter already rewrites it, for comparisons and
assignments) so that `and`/`or` call `logical_and` / `logical_or` for tensors, and short-circuit only on
compile-time values, as the code generator does.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from types import ModuleType
from typing import Any

_AND, _OR = "_gpuemu_logical_and", "_gpuemu_logical_or"

# Called with a short description of where a block-valued `and`/`or` was evaluated (the layer records it).
on_block_operands: list[Callable[[], None]] = []


def _is_dynamic(value: Any) -> bool:
    import triton.language as tl

    return isinstance(value, tl.tensor) and not isinstance(value, tl.constexpr)


def _is_block(value: Any) -> bool:
    return _is_dynamic(value) and value.type.is_block()


def _combine(method: str, short_circuit_on: bool, operands: tuple[Callable[[], Any], ...]) -> Any:
    dynamic: list[Any] = []
    value: Any = None
    for operand in operands:
        value = operand()
        if not _is_dynamic(value):
            if bool(value) is short_circuit_on:
                return value
            continue
        dynamic.append(value)
    if not dynamic:
        return value
    if any(_is_block(v) for v in dynamic):
        for hook in on_block_operands:
            hook()
    result = dynamic[-1]
    for lhs in reversed(dynamic[:-1]):
        result = getattr(lhs, method)(result)
    return result


def logical_and(*operands: Callable[[], Any]) -> Any:
    """Python `and` over thunks of the operands, elementwise on blocks (as the GPU compiler evaluates it)."""
    return _combine("logical_and", False, operands)


def logical_or(*operands: Callable[[], Any]) -> Any:
    """Python `or` over thunks of the operands, elementwise on blocks (as the GPU compiler evaluates it)."""
    return _combine("logical_or", True, operands)


def transformer_class(base: type) -> type:
    """A subclass of the interpreter's AST transformer that also rewrites `and`/`or`."""

    class BoolOpTransformer(base):  # type: ignore[misc]  # the interpreter's transformer, known at run time
        def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
            node = self.generic_visit(node)
            name = _AND if isinstance(node.op, ast.And) else _OR
            empty = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[])
            thunks: list[ast.expr] = [ast.Lambda(args=empty, body=value) for value in node.values]
            call = ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=thunks, keywords=[])
            return ast.copy_location(call, node)

        def visit_Assign(self, node: ast.Assign) -> ast.AST:
            # Triton 3.6's transformer wraps an assignment's value without visiting it: rewrite it first (a
            # later one visits it too, and finds no `and`/`or` left).
            node.value = self.visit(node.value)
            parent = getattr(super(), "visit_Assign", None)
            return parent(node) if parent is not None else node

    return BoolOpTransformer


def install(module: ModuleType) -> None:
    """Rewrite `and`/`or` in every kernel the interpreter module rewrites from now on (and forget kernels it
    rewrote before, so they are rewritten again)."""
    rewriter = getattr(module, "FunctionRewriter", None)
    base = getattr(module, "ASTTransformer", None)
    if rewriter is None or base is None or getattr(rewriter, "_gpuemu_boolops", False):
        return
    setattr(module, _AND, logical_and)  # the rewriter copies the module's globals into the kernel's
    setattr(module, _OR, logical_or)
    rewriter.ast_transformer = transformer_class(base)()
    rewriter._gpuemu_boolops = True
    cache = getattr(getattr(module, "InterpretedFunction", None), "rewritten_fn", None)
    if isinstance(cache, dict):
        cache.clear()
