"""Launch expressions for [[kernels]]: small integer arithmetic over dims, parsed with `ast`, never eval'ed.

Allowed: integer and float literals, names (dims, numeric kwargs), `+ - * / // %`, unary minus, parentheses,
and the functions `ceil`, `floor`, `min`, `max`, `cdiv(a, b)` (ceil division), `stride(x, axis)` and
`size(x, axis)` of an input (element strides). `/` is exact (rational arithmetic), so `ceil(N / 256)` is
exact for every N. Anything else (attributes, subscripts, calls to other names, comparisons, `**`) is
rejected when the expression is parsed, with a message that names the construct.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

MAX_EXPRESSION_CHARS = 300


class LaunchError(ValueError):
    """A launch description is malformed or does not fit the case's shapes."""


Number = Fraction
_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod)
_FUNCS = {"ceil": 1, "floor": 1, "min": None, "max": None, "cdiv": 2, "stride": 2, "size": 2}


@dataclass(frozen=True)
class Expr:
    """A parsed, validated launch expression."""

    text: str
    names: frozenset[str]  # free names it reads (dims, kwargs, array names inside stride()/size())


def _literal_int(node: ast.AST) -> int | None:
    """The value of an integer literal like `2` or `-1`, else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _literal_int(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _check(node: ast.AST, text: str, names: set[str]) -> None:
    if isinstance(node, ast.Expression):
        _check(node.body, text, names)
    elif isinstance(node, ast.BinOp) and isinstance(node.op, _BINOPS):
        _check(node.left, text, names)
        _check(node.right, text, names)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        _check(node.operand, text, names)
    elif (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        if not math.isfinite(node.value):  # "1e999" parses as inf: no launch size is infinite
            raise LaunchError(f"{text!r}: {node.value!r} is not a finite number")
    elif isinstance(node, ast.Name):
        names.add(node.id)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS:
        arity = _FUNCS[node.func.id]
        if node.keywords or (arity is not None and len(node.args) != arity) or not node.args:
            raise LaunchError(f"{text!r}: wrong arguments to {node.func.id}()")
        if node.func.id in ("stride", "size"):
            array, axis = node.args
            if not isinstance(array, ast.Name) or _literal_int(axis) is None:
                raise LaunchError(f"{text!r}: use {node.func.id}(input_name, axis) with a literal axis")
            names.add(array.id)
            return
        for arg in node.args:
            _check(arg, text, names)
    else:
        what = (
            f"operator {type(node.op).__name__}"
            if isinstance(node, ast.BinOp | ast.UnaryOp)
            else type(node).__name__
        )
        raise LaunchError(
            f"{text!r}: {what} is not allowed (use numbers, names, + - * / // %, ceil floor min max cdiv)"
        )


def parse_expression(text: str, allowed: Iterable[str] | None = None) -> Expr:
    """Validate a launch expression; `allowed` (if given) lists the names it may read."""
    if len(text) > MAX_EXPRESSION_CHARS:
        raise LaunchError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise LaunchError(f"{text!r} is not a valid expression: {exc.msg}") from None
    names: set[str] = set()
    _check(tree, text, names)
    if allowed is not None:
        unknown = sorted(names - set(allowed))
        if unknown:
            raise LaunchError(f"{text!r} uses unknown name(s) {', '.join(unknown)}")
    return Expr(text.strip(), frozenset(names))


@dataclass(frozen=True)
class ArrayInfo:
    """Shape and element strides of an input, for stride()/size()."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]


def _eval(node: ast.AST, env: Mapping[str, Number], arrays: Mapping[str, ArrayInfo], text: str) -> Number:
    if isinstance(node, ast.Expression):
        return _eval(node.body, env, arrays, text)
    if isinstance(node, ast.Constant):
        if not isinstance(node.value, (int, float)) or isinstance(node.value, bool):
            raise LaunchError(f"{text!r}: {node.value!r} is not a number")
        return Fraction(node.value)
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise LaunchError(f"{text!r}: {node.id!r} has no value here")
        return env[node.id]
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, env, arrays, text)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left = _eval(node.left, env, arrays, text)
        right = _eval(node.right, env, arrays, text)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        if right == 0:
            raise LaunchError(f"{text!r}: division by zero")
        if isinstance(node.op, ast.Div):
            return left / right
        if isinstance(node.op, ast.FloorDiv):
            return Fraction(left // right)
        return left % right
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    name = node.func.id
    if name in ("stride", "size"):
        array, axis = node.args[0].id, _literal_int(node.args[1])  # type: ignore[attr-defined]
        assert axis is not None  # checked when parsed
        info = arrays.get(array)
        if info is None:
            raise LaunchError(f"{text!r}: {array!r} is not an input")
        if not -len(info.shape) <= axis < len(info.shape):
            raise LaunchError(f"{text!r}: {array!r} has no axis {axis}")
        return Fraction((info.strides if name == "stride" else info.shape)[axis])
    args = [_eval(a, env, arrays, text) for a in node.args]
    if name == "ceil":
        return Fraction(math.ceil(args[0]))
    if name == "floor":
        return Fraction(math.floor(args[0]))
    if name == "min":
        return min(args)
    if name == "max":
        return max(args)
    if args[1] == 0:
        raise LaunchError(f"{text!r}: division by zero")
    return Fraction(math.ceil(args[0] / args[1]))  # cdiv


def evaluate(
    expr: Expr | str,
    env: Mapping[str, int | float],
    arrays: Mapping[str, ArrayInfo] | None = None,
) -> Fraction:
    """The exact value of an expression (a Fraction; callers decide whether it must be an integer)."""
    parsed = expr if isinstance(expr, Expr) else parse_expression(expr)
    tree = ast.parse(parsed.text, mode="eval")
    exact = {
        k: Fraction(v)
        for k, v in env.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }
    return _eval(tree, exact, arrays or {}, parsed.text)


def evaluate_int(
    expr: Expr | str, env: Mapping[str, int | float], arrays: Mapping[str, ArrayInfo] | None = None
) -> int:
    value = evaluate(expr, env, arrays)
    if value.denominator != 1:
        text = expr.text if isinstance(expr, Expr) else expr
        raise LaunchError(f"{text!r} is {float(value):g} here, not an integer (use ceil() or //)")
    return int(value)
