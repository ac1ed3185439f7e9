"""Properties of the schema and launch expressions (config/expressions.py) over generated expressions.

What a user relies on: an expression in gpuemu.toml means what it means in Python's integer arithmetic, exactly
(no float rounding, whatever the size of the numbers); a division by zero is a clear error, never a value; and
no text at all, however malformed, gets past the parser as anything but a clear `ExpressionError`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuemu_ci.config.expressions import (
    ExpressionError,
    evaluate,
    evaluate_condition,
    evaluate_int,
    parse_expression,
)

NAMES = ("M", "N", "K")
Env = Mapping[str, int]


@dataclass(frozen=True)
class Term:
    """An expression's text and its meaning in Python integers (which raises ZeroDivisionError as Python does)."""

    text: str
    value: Callable[[Env], int]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _binary(symbol: str, function: Callable[[int, int], int]) -> Callable[[Term, Term], Term]:
    return lambda a, b: Term(
        f"({a.text} {symbol} {b.text})", lambda env: function(a.value(env), b.value(env))
    )


def _call(name: str, function: Callable[[int, int], int]) -> Callable[[Term, Term], Term]:
    return lambda a, b: Term(f"{name}({a.text}, {b.text})", lambda env: function(a.value(env), b.value(env)))


def _division(name: str, function: Callable[[int, int], int]) -> Callable[[Term, Term], Term]:
    """`ceil(a / b)` and `floor(a / b)`: `/` is exact, so these are integer ceil and floor division."""
    return lambda a, b: Term(f"{name}({a.text} / {b.text})", lambda env: function(a.value(env), b.value(env)))


COMBINE = [
    _binary("+", operator.add),
    _binary("-", operator.sub),
    _binary("*", operator.mul),
    _binary("//", operator.floordiv),
    _binary("%", operator.mod),
    _call("min", min),
    _call("max", max),
    _call("cdiv", _cdiv),
    _division("ceil", _cdiv),
    _division("floor", operator.floordiv),
]

literals = st.integers(-(10**30), 10**30).map(lambda n: Term(f"({n})" if n < 0 else str(n), lambda env: n))
names = st.sampled_from(NAMES).map(lambda name: Term(name, lambda env: env[name]))


def _extend(children: st.SearchStrategy[Term]) -> st.SearchStrategy[Term]:
    negated = children.map(lambda a: Term(f"-{a.text}", lambda env: -a.value(env)))
    combined = st.tuples(st.sampled_from(COMBINE), children, children).map(lambda t: t[0](t[1], t[2]))
    return negated | combined


terms = st.recursive(literals | names, _extend, max_leaves=12).filter(lambda t: len(t.text) <= 300)
envs = st.fixed_dictionaries({name: st.integers(-(2**40), 2**40) for name in NAMES})


def python_value(term: Term, env: Env) -> int | None:
    """The Python meaning, or None where Python divides by zero."""
    try:
        return term.value(env)
    except ZeroDivisionError:
        return None


@given(st.sampled_from(COMBINE), terms, terms, envs)
def test_integer_expressions_agree_with_python(
    combine: Callable[[Term, Term], Term], left: Term, right: Term, env: dict[str, int]
) -> None:
    term = combine(left, right)  # every operator at the top, over generated subexpressions
    expected = python_value(term, env)
    if expected is None:
        with pytest.raises(ExpressionError, match="division by zero"):
            evaluate_int(term.text, env)
    else:
        assert evaluate_int(term.text, env) == expected


@given(st.integers(-(10**40), 10**40), st.integers(-(10**40), 10**40).filter(bool))
def test_division_is_exact(a: int, b: int) -> None:
    """`/` is rational: `ceil(N / 256)` is right for every N, where float division loses the last digits."""
    assert evaluate(f"({a}) / ({b})", {}) == Fraction(a, b)
    assert evaluate_int(f"ceil(({a}) / ({b}))", {}) == -(-a // b)
    if a % b:
        with pytest.raises(ExpressionError, match="not an integer"):
            evaluate_int(f"({a}) / ({b})", {})


COMPARISONS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt}
COMPARISONS[">="] = operator.ge


@given(terms, st.sampled_from(sorted(COMPARISONS)), terms, envs, st.booleans())
def test_conditions_agree_with_python(
    left: Term, symbol: str, right: Term, env: dict[str, int], negate: bool
) -> None:
    a, b = python_value(left, env), python_value(right, env)
    text = f"{left.text} {symbol} {right.text}"
    text = f"not ({text})" if negate else text
    parse_expression(text, NAMES, logic=True)
    if a is None or b is None:
        with pytest.raises(ExpressionError, match="division by zero"):
            evaluate_condition(text, env)
    else:
        assert evaluate_condition(text, env) is (COMPARISONS[symbol](a, b) != negate)


@given(terms, st.lists(terms, min_size=1, max_size=4), envs)
def test_membership_agrees_with_python(item: Term, members: list[Term], env: dict[str, int]) -> None:
    values = [python_value(t, env) for t in [item, *members]]
    text = f"{item.text} in ({', '.join(m.text for m in members)},)"
    if None in values:
        with pytest.raises(ExpressionError):
            evaluate_condition(text, env)
    else:
        assert evaluate_condition(text, env) is (values[0] in values[1:])


EXPRESSION_CHARACTERS = st.sampled_from(
    [*"MNK0123456789+-*/%()<>=!, .'\"_[]{}:;@`\\\n\t\x00", "and", "or", "not", "in", "ceil", "min", "**"]
)


@given(st.lists(EXPRESSION_CHARACTERS, max_size=40).map("".join) | st.text(max_size=60), st.booleans())
def test_any_text_is_a_value_or_an_expression_error(text: str, logic: bool) -> None:
    """What a user writes in gpuemu.toml never ends in a traceback: it parses (and then evaluates to a value or
    an ExpressionError) or it is rejected with an ExpressionError."""
    try:
        expr = parse_expression(text, logic=logic)
    except ExpressionError:
        return
    env = {name: 7 for name in expr.names}
    try:
        value = evaluate_condition(expr, env) if logic else evaluate(expr, env)
    except ExpressionError:
        return
    assert isinstance(value, bool if logic else Fraction)
