"""Safe expressions: small exact arithmetic over dims and kwargs, parsed with `ast`, never eval'ed. Used by
[[kernels]] launches and by op schemas (derived dims, dim bounds, kwargs bound to dims, constraints).

Allowed: integer and float literals, names (dims, numeric kwargs), `+ - * / // %`, unary minus, parentheses,
and the functions `ceil`, `floor`, `min`, `max`, `cdiv(a, b)` (ceil division), `stride(x, axis)` and
`size(x, axis)` of an input (element strides). `/` is exact (rational arithmetic), so `ceil(N / 256)` is
exact for every N. Anything else (attributes, subscripts, calls to other names, `**`) is rejected when the
expression is parsed, with a message that names the construct.

Conditions (`logic=True`, for constraints) also allow comparisons (`== != < <= > >=`, chained), `and`, `or`,
`not`, membership in a literal tuple or list (`CB in (1, B)`), string literals to compare with string kwargs
(`mode == "mean"`) and `True`/`False`.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

MAX_EXPRESSION_CHARS = 300


class LaunchError(ValueError):
    """An expression is malformed, or (launches) does not fit the case's shapes."""


ExpressionError = LaunchError  # the name schema code uses


Number = Fraction
_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod)
_FUNCS = {"ceil": 1, "floor": 1, "min": None, "max": None, "cdiv": 2, "stride": 2, "size": 2}
_COMPARE = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn)
Value = Fraction | bool | str


@dataclass(frozen=True)
class Expr:
    """A parsed, validated launch expression."""

    text: str
    names: frozenset[str]  # free names it reads (dims, kwargs, array names inside stride()/size())
    logic: bool = False  # a condition (comparisons, and/or/not) rather than a number


def _literal_int(node: ast.AST) -> int | None:
    """The value of an integer literal like `2` or `-1`, else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _literal_int(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _check(node: ast.AST, text: str, names: set[str], logic: bool = False) -> None:
    if isinstance(node, ast.Expression):
        _check(node.body, text, names, logic)
    elif isinstance(node, ast.BinOp) and isinstance(node.op, _BINOPS):
        _check(node.left, text, names, logic)
        _check(node.right, text, names, logic)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        _check(node.operand, text, names, logic)
    elif isinstance(node, ast.Constant) and type(node.value) in (
        (int, float, str, bool) if logic else (int, float)
    ):
        if type(node.value) is float and not math.isfinite(node.value):  # "1e999" parses as inf
            raise LaunchError(f"{text!r}: {node.value!r} is not a finite number")
    elif logic and isinstance(node, ast.Compare) and all(isinstance(o, _COMPARE) for o in node.ops):
        _check(node.left, text, names, logic)
        for op, right in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, ast.In | ast.NotIn):
                if not isinstance(right, ast.Tuple | ast.List):
                    raise LaunchError(f"{text!r}: `in` needs a literal tuple or list, e.g. `CB in (1, B)`")
                for item in right.elts:
                    _check(item, text, names, logic)
            else:
                _check(right, text, names, logic)
    elif logic and isinstance(node, ast.BoolOp):
        for value in node.values:
            _check(value, text, names, logic)
    elif logic and isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        _check(node.operand, text, names, logic)
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
            _check(arg, text, names, logic)
    else:
        what = (
            f"operator {type(node.op).__name__}"
            if isinstance(node, ast.BinOp | ast.UnaryOp)
            else type(node).__name__
        )
        allowed_text = "numbers, names, + - * / // %, ceil floor min max cdiv"
        if logic:
            allowed_text += ", comparisons, and/or/not, `in (...)`"
        raise LaunchError(f"{text!r}: {what} is not allowed (use {allowed_text})")


def parse_expression(text: str, allowed: Iterable[str] | None = None, *, logic: bool = False) -> Expr:
    """Validate an expression; `allowed` (if given) lists the names it may read; `logic` admits conditions."""
    if len(text) > MAX_EXPRESSION_CHARS:
        raise LaunchError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise LaunchError(f"{text!r} is not a valid expression: {exc.msg}") from None
    names: set[str] = set()
    _check(tree, text, names, logic)
    if allowed is not None:
        unknown = sorted(names - set(allowed))
        if unknown:
            raise LaunchError(f"{text!r} uses unknown name(s) {', '.join(unknown)}")
    return Expr(text.strip(), frozenset(names), logic)


@dataclass(frozen=True)
class ArrayInfo:
    """Shape and element strides of an input, for stride()/size()."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]


def _number(value: Value, text: str) -> Number:
    if isinstance(value, bool) or not isinstance(value, Fraction):
        raise LaunchError(f"{text!r}: {value!r} is not a number")
    return value


def _eval(node: ast.AST, env: Mapping[str, Value], arrays: Mapping[str, ArrayInfo], text: str) -> Value:
    if isinstance(node, ast.Expression):
        return _eval(node.body, env, arrays, text)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool | str):
            return node.value
        if not isinstance(node.value, (int, float)):
            raise LaunchError(f"{text!r}: {node.value!r} is not a number")
        return Fraction(node.value)
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise LaunchError(f"{text!r}: {node.id!r} has no value here")
        return env[node.id]
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, arrays, text)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, ast.In | ast.NotIn):
                assert isinstance(right_node, ast.Tuple | ast.List)
                items = [_eval(item, env, arrays, text) for item in right_node.elts]
                holds = left in items if isinstance(op, ast.In) else left not in items
                right: Value = left
            else:
                right = _eval(right_node, env, arrays, text)
                holds = _compare(op, left, right, text)
            if not holds:
                return False
            left = right
        return True
    if isinstance(node, ast.BoolOp):
        values = (_truth(_eval(v, env, arrays, text)) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.UnaryOp):
        if isinstance(node.op, ast.Not):
            return not _truth(_eval(node.operand, env, arrays, text))
        value = _number(_eval(node.operand, env, arrays, text), text)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left = _number(_eval(node.left, env, arrays, text), text)
        right = _number(_eval(node.right, env, arrays, text), text)
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
        first = node.args[0]
        assert isinstance(first, ast.Name)  # checked when parsed
        array, axis = first.id, _literal_int(node.args[1])
        assert axis is not None  # checked when parsed
        info = arrays.get(array)
        if info is None:
            raise LaunchError(f"{text!r}: {array!r} is not an input")
        if not -len(info.shape) <= axis < len(info.shape):
            raise LaunchError(f"{text!r}: {array!r} has no axis {axis}")
        return Fraction((info.strides if name == "stride" else info.shape)[axis])
    args = [_number(_eval(a, env, arrays, text), text) for a in node.args]
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


def _compare(op: ast.cmpop, left: Value, right: Value, text: str) -> bool:
    if isinstance(op, ast.Eq):
        return left == right
    if isinstance(op, ast.NotEq):
        return left != right
    if isinstance(left, str) or isinstance(right, str):
        raise LaunchError(f"{text!r}: strings can only be compared with == and !=")
    a, b = _number(left, text), _number(right, text)
    if isinstance(op, ast.Lt):
        return a < b
    if isinstance(op, ast.LtE):
        return a <= b
    if isinstance(op, ast.Gt):
        return a > b
    return a >= b


def _truth(value: Value) -> bool:
    return bool(value)


def evaluate(
    expr: Expr | str,
    env: Mapping[str, object],
    arrays: Mapping[str, ArrayInfo] | None = None,
) -> Fraction:
    """The exact value of an expression (a Fraction; callers decide whether it must be an integer)."""
    parsed = expr if isinstance(expr, Expr) else parse_expression(expr)
    value = _eval(_tree(parsed.text), _exact(env), arrays or {}, parsed.text)
    return _number(value, parsed.text)


def evaluate_condition(expr: Expr | str, env: Mapping[str, object]) -> bool:
    """Whether a condition (parsed with `logic=True`) holds for these dim and kwarg values."""
    parsed = expr if isinstance(expr, Expr) else parse_expression(expr, logic=True)
    return _truth(_eval(_tree(parsed.text), _exact(env), {}, parsed.text))


def _exact(env: Mapping[str, object]) -> dict[str, Value]:
    """Numbers as exact Fractions; strings and booleans as they are; anything else is not readable."""
    exact: dict[str, Value] = {}
    for key, value in env.items():
        if isinstance(value, bool | str):
            exact[key] = value
        elif isinstance(value, int | float) and math.isfinite(value):  # inf and NaN have no exact value
            exact[key] = Fraction(value)
        elif isinstance(value, Fraction):
            exact[key] = value
    return exact


_TREES: dict[str, ast.Expression] = {}


def _tree(text: str) -> ast.Expression:
    """The parsed tree of a validated expression (cached: schemas evaluate the same few texts per case)."""
    tree = _TREES.get(text)
    if tree is None:
        tree = _TREES[text] = ast.parse(text, mode="eval")
    return tree


def evaluate_int(
    expr: Expr | str, env: Mapping[str, object], arrays: Mapping[str, ArrayInfo] | None = None
) -> int:
    """An expression's value, which must be an integer (a size, a stride)."""
    value = evaluate(expr, env, arrays)
    if value.denominator != 1:
        text = expr.text if isinstance(expr, Expr) else expr
        raise LaunchError(f"{text!r} is {float(value):g} here, not an integer (use ceil() or //)")
    return int(value)
