"""An op's schema as a graph of named values: drawn dims, derived dims (`C = "G * CPG"`), fuzzed kwargs and
kwargs bound to dims (`num_groups = "G"`), with range ends and typical sizes that may name other dims, and
constraints over all of them.

`Schema` is built once per op. It checks names and cycles (a ConfigError with the line), orders the values so
each comes after what it reads, and evaluates one assignment: derived dims and bound kwargs, the concrete range
of a drawn dim, and which constraints hold. The sampler (fuzz/shapes.py) draws with it; `validate` checks the
declared sizes at load.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import SupportsInt

from gpuemu_ci.config.expressions import (
    Expr,
    ExpressionError,
    evaluate,
    evaluate_condition,
    parse_expression,
)
from gpuemu_ci.config.model import DimConstraint, DimSpec, OpShapes
from gpuemu_ci.errors import ConfigError

MAX_TYPICAL_COMBINATIONS = 4096  # typical-size combinations checked at load (and enumerated per case)
MAX_KWARG_COMBINATIONS = 64  # kwarg combinations tried with each range end at load


@dataclass(frozen=True)
class Problem:
    """Why an assignment is not a valid case. `constraint` problems exclude it; the others are errors of the
    schema when the user's own sizes produce them."""

    kind: str  # "constraint" | "derived" | "range"
    name: str  # the constraint's text, or the dim
    message: str
    line: int | None = None


class Schema:
    """The named values of one op's shapes and the order to compute them in."""

    def __init__(
        self, op_name: str, shapes: OpShapes, op_line: int | None = None, path: str | None = None
    ) -> None:
        self.op_name = op_name
        self.op_line = op_line
        self.path = path
        self.dims: dict[str, DimSpec] = {d.name: d for d in shapes.dims}
        self.free_kwargs: dict[str, tuple[object, ...]] = dict(shapes.kwargs)
        self.bindings: dict[str, str] = dict(shapes.kwarg_bindings)
        self.constraints: tuple[DimConstraint, ...] = shapes.constraints
        self._exprs: dict[str, Expr] = {}
        # Literal sizes only (no expression, derived dim, bound kwarg or constraint): nothing reads anything,
        # and every typical size lies in its range (checked as the dims were read), so there is nothing left to
        # order, check or estimate. Most ops are so; a config of many ops loads in time linear and small.
        self.literal = not (self.bindings or self.constraints) and not any(
            d.is_derived or d.min_expr or d.max_expr or d.typical_terms for d in self.dims.values()
        )
        self._check_names()
        if self.literal:
            self._deps: dict[str, frozenset[str]] = {}
            self.order: tuple[str, ...] = (*self.free_kwargs, *self.dims)
        else:
            self._deps = {n: self._deps_of(n) for n in (*self.free_kwargs, *self.dims, *self.bindings)}
            self.order = self._topological()
        self.free_dims = tuple(n for n in self.order if n in self.dims and not self.dims[n].is_derived)
        self.computed = tuple(n for n in self.order if n in self.bindings or self._derived(n))
        self._constraint_exprs = tuple((c, self._expr(c.expression, logic=True)) for c in self.constraints)

    # --- building --------------------------------------------------------------------------------------
    def _expr(self, text: str, logic: bool = False) -> Expr:
        key = ("?" if logic else "") + text
        parsed = self._exprs.get(key)
        if parsed is None:
            parsed = self._exprs[key] = parse_expression(text, logic=logic)
        return parsed

    def _derived(self, name: str) -> bool:
        dim = self.dims.get(name)
        return dim is not None and dim.is_derived

    def _sources(self, name: str) -> list[tuple[str, str]]:
        """(what, expression text) pairs a value reads, for dependencies and messages."""
        if name in self.bindings:
            return [(f"kwarg `{name}`", self.bindings[name])]
        dim = self.dims.get(name)
        if dim is None:
            return []
        sources = []
        if dim.derived:
            sources.append((f"dim `{name}`", dim.derived))
        if dim.min_expr:
            sources.append((f"`min` of dim `{name}`", dim.min_expr))
        if dim.max_expr:
            sources.append((f"`max` of dim `{name}`", dim.max_expr))
        sources += [(f"`typical` of dim `{name}`", t) for t in dim.typical_terms if isinstance(t, str)]
        return sources

    def _deps_of(self, name: str) -> frozenset[str]:
        return frozenset(n for _, text in self._sources(name) for n in self._expr(text).names)

    def deps(self, name: str) -> frozenset[str]:
        """The names `name` reads (its expression, range ends and typical sizes)."""
        return self._deps.get(name, frozenset())

    def _line(self, name: str) -> int | None:
        dim = self.dims.get(name)
        return (dim.line if dim is not None else None) or self.op_line

    def _error(self, message: str, line: int | None) -> ConfigError:
        return ConfigError(f"op {self.op_name!r}: {message}", path=self.path, line=line or self.op_line)

    def _check_names(self) -> None:
        clash = sorted(set(self.dims) & (set(self.free_kwargs) | set(self.bindings)))
        if clash:
            raise self._error(f"{clash[0]!r} is both a dim and a kwarg; rename one", self._line(clash[0]))
        if self.literal:
            return  # no expression names anything
        known = set(self.dims) | set(self.free_kwargs) | set(self.bindings)
        listing = f"dims: {', '.join(self.dims) or 'none'}; kwargs: {', '.join(self.free_kwargs) or 'none'}"
        for name in (*self.dims, *self.bindings):
            for what, text in self._sources(name):
                unknown = sorted(self._expr(text).names - known)
                if unknown:
                    raise self._error(
                        f"{what} ({text!r}) names {unknown[0]!r}, which is neither a dim nor a kwarg ({listing})",
                        self._line(name),
                    )
        for constraint in self.constraints:
            unknown = sorted(self._expr(constraint.expression, logic=True).names - known)
            if unknown:
                raise self._error(
                    f"constraint {constraint.expression!r} names {unknown[0]!r}, which is neither a dim nor a "
                    f"kwarg ({listing})",
                    constraint.line,
                )

    def _topological(self) -> tuple[str, ...]:
        """Free kwargs, then dims and bound kwargs, each after what it reads (declaration order otherwise)."""
        names = [*self.free_kwargs, *self.dims, *self.bindings]
        deps = {n: self.deps(n) for n in names}
        done: list[str] = []
        placed: set[str] = set()
        while len(done) < len(names):
            ready = [n for n in names if n not in placed and deps[n] <= placed]
            if not ready:
                raise self._cycle(deps, [n for n in names if n not in placed])
            done.append(ready[0])
            placed.add(ready[0])
        return tuple(done)

    def _cycle(self, deps: Mapping[str, frozenset[str]], pending: list[str]) -> ConfigError:
        path = [pending[0]]
        while True:
            following = next(d for d in sorted(deps[path[-1]]) if d in pending)
            if following in path:
                loop = [*path[path.index(following) :], following]
                return self._error(
                    f"dims and kwargs read one another in a cycle: {' -> '.join(loop)}", self._line(loop[0])
                )
            path.append(following)

    # --- one assignment ---------------------------------------------------------------------------------
    def bounds(self, name: str, values: Mapping[str, object]) -> tuple[int, int]:
        """The range of drawn dim `name` given the values it reads (ValueError when an end is not a size)."""
        dim = self.dims[name]
        low = self._integer(dim.min_expr, values, f"`min` of {name}") if dim.min_expr else dim.low
        high = self._integer(dim.max_expr, values, f"`max` of {name}") if dim.max_expr else dim.high
        return low, high

    def typical(self, name: str, values: Mapping[str, object]) -> tuple[int, ...]:
        """The typical sizes of drawn dim `name` (expressions evaluated), in declared order."""
        sizes = []
        for term in self.dims[name].terms:
            sizes.append(term if isinstance(term, int) else self._integer(term, values, f"typical of {name}"))
        return tuple(sizes)

    def _value(self, text: str, values: Mapping[str, object]) -> Fraction:
        expr = self._expr(text)
        return evaluate(expr, {n: values[n] for n in expr.names if n in values})

    def _integer(self, text: str, values: Mapping[str, object], what: str) -> int:
        try:
            value = self._value(text, values)
        except ExpressionError as exc:
            raise ValueError(f"{what}: {exc}") from None
        if value.denominator != 1:
            raise ValueError(f"{what} ({text}) is {float(value):g}, not a whole number (use //)")
        return int(value)

    def settle(self, values: dict[str, object]) -> list[Problem]:
        """Computes every derived dim and bound kwarg whose inputs are known (in place) and checks what can be
        checked: derived dims (whole, >= 0, inside a declared range), drawn dims inside their ranges, and each
        constraint whose names are all known."""
        problems: list[Problem] = []
        for name in self.computed:
            if name in values or not self.deps(name) <= values.keys():
                continue
            text = self.bindings.get(name) or self.dims[name].derived or ""
            try:
                value = self._value(text, values)
            except ExpressionError as exc:
                problems.append(Problem("derived", name, f"{name} = {text} cannot be evaluated: {exc}"))
                continue
            if name in self.bindings:
                values[name] = int(value) if value.denominator == 1 else float(value)
                continue
            problem = self._derived_problem(name, text, value, values)
            if problem is not None:
                problems.append(problem)
            values[name] = int(value) if value.denominator == 1 else float(value)
        for name in self.free_dims:
            if name in values and self.deps(name) <= values.keys():
                try:
                    low, high = self.bounds(name, values)
                except ValueError as exc:
                    problems.append(Problem("range", name, str(exc), self._line(name)))
                    continue
                size = values[name]
                if isinstance(size, int) and not low <= size <= high:
                    problems.append(
                        Problem(
                            "range", name, f"{name} = {size} lies outside [{low}, {high}]", self._line(name)
                        )
                    )
        for constraint, expr in self._constraint_exprs:
            if expr.names <= values.keys():
                try:
                    holds = evaluate_condition(expr, {n: values[n] for n in expr.names})
                except ExpressionError as exc:
                    problems.append(Problem("constraint", constraint.expression, str(exc), constraint.line))
                    continue
                if not holds:
                    problems.append(
                        Problem(
                            "constraint",
                            constraint.expression,
                            f"constraint {constraint.expression!r} does not hold",
                            constraint.line,
                        )
                    )
        return problems

    def suggestions(self, name: str, values: Mapping[str, object]) -> list[int]:
        """Sizes of drawn dim `name` that the constraints point at, given the values known: the other side of
        `name == ...`, the members of `name in (...)`, and the sizes at and around the bounds of `name < ...`
        (so an equality or a membership is met without searching)."""
        found: list[int] = []
        for _, expr in self._constraint_exprs:
            if name in expr.names and expr.names - {name} <= values.keys():
                tree = ast.parse(expr.text, mode="eval").body
                self._collect(tree, name, values, found)
        return list(dict.fromkeys(found))

    def _collect(self, node: ast.AST, name: str, values: Mapping[str, object], found: list[int]) -> None:
        if isinstance(node, ast.BoolOp):
            for value in node.values:
                self._collect(value, name, values, found)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            self._collect(node.operand, name, values, found)
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for left, op, right in zip(operands, node.ops, operands[1:], strict=False):
                if (
                    isinstance(op, ast.In)
                    and _is_name(left, name)
                    and isinstance(right, ast.Tuple | ast.List)
                ):
                    found += [v for item in right.elts for v in self._sizes_of(item, values, 0)]
                elif _is_name(left, name) or _is_name(right, name):
                    other = right if _is_name(left, name) else left
                    spread = 0 if isinstance(op, ast.Eq) else 1
                    found += self._sizes_of(other, values, spread)

    def _sizes_of(self, node: ast.AST, values: Mapping[str, object], spread: int) -> list[int]:
        text = ast.unparse(node)
        try:
            value = self._value(text, values)
        except (ExpressionError, KeyError):
            return []
        centre = int(value) if value.denominator == 1 else round(value)
        return [centre + d for d in range(-spread, spread + 1)]

    def _derived_problem(
        self, name: str, text: str, value: Fraction, values: Mapping[str, object]
    ) -> Problem | None:
        line = self._line(name)
        if value.denominator != 1:
            return Problem("derived", name, f"{name} = {text} is {float(value):g}, not a whole number", line)
        if value < 0:
            return Problem("derived", name, f"{name} = {text} is {value}, below 0", line)
        dim = self.dims[name]
        try:
            low = self._integer(dim.min_expr, values, f"`min` of {name}") if dim.min_expr else dim.low
            high = self._integer(dim.max_expr, values, f"`max` of {name}") if dim.max_expr else None
        except ValueError as exc:
            return Problem("derived", name, str(exc), line)
        if high is None and dim.high > 0:
            high = dim.high
        if value < low or (high is not None and value > high):
            top = "" if high is None else str(high)
            return Problem("derived", name, f"{name} = {text} is {value}, outside [{low}, {top}]", line)
        return None

    # --- the declared sizes -----------------------------------------------------------------------------
    def typical_assignments(
        self, kwargs: Mapping[str, object] | None = None, limit: int = MAX_TYPICAL_COMBINATIONS
    ) -> Iterator[dict[str, object]]:
        """Complete assignments of the typical sizes (each free kwarg over its candidates unless `kwargs` fixes
        it), in a fixed order; problems not checked."""
        choices: list[tuple[str, tuple[object, ...]]] = []
        for name in self.order:
            if name in self.free_kwargs:
                fixed = kwargs is not None and name in kwargs
                choices.append((name, ((kwargs or {})[name],) if fixed else self.free_kwargs[name]))

        def walk(index: int, values: dict[str, object]) -> Iterator[dict[str, object]]:
            if index == len(self.free_dims):
                yield values
                return
            name = self.free_dims[index]
            try:
                sizes = self.typical(name, values)
            except ValueError:
                return
            for size in dict.fromkeys(sizes):
                yield from walk(index + 1, {**values, name: size})

        produced = 0
        for combination in itertools.product(*(options for _, options in choices)):
            start = dict(zip((n for n, _ in choices), combination, strict=True))
            for values in walk(0, start):
                yield values
                produced += 1
                if produced >= limit:
                    return

    def validate(self) -> None:
        """At load: the typical sizes must give at least one case that meets the constraints, and no typical
        combination or range end that meets them may make a derived dim negative, fractional or out of range."""
        if self.literal:
            return
        valid: list[dict[str, object]] = []
        failing: dict[str, int] = {}
        example: dict[str, dict[str, object]] = {}
        for values in self.typical_assignments():
            problems = self.settle(values)
            violated = [p for p in problems if p.kind == "constraint"]
            if violated:
                for p in violated:
                    failing[p.name] = failing.get(p.name, 0) + 1
                    example.setdefault(p.name, values)
                continue
            self._raise_for(problems, values, "the typical sizes")
            valid.append(values)
        if not valid:
            if failing:
                worst = max(failing, key=lambda k: failing[k])
                line = next((c.line for c in self.constraints if c.expression == worst), None)
                raise self._error(
                    f"no combination of the typical sizes satisfies the constraint {worst!r} (for example "
                    f"{_show(example[worst], self)})",
                    line,
                )
            raise self._error("the typical sizes give no case (check the dims' typical sizes)", self.op_line)
        base = {k: v for k, v in valid[0].items() if k in self.free_dims}
        kwarg_combinations = list(
            itertools.islice(itertools.product(*self.free_kwargs.values()), MAX_KWARG_COMBINATIONS)
        )
        for name in self.free_dims:
            for combination in kwarg_combinations:
                values = {**dict(zip(self.free_kwargs, combination, strict=True)), **base}
                try:
                    ends = self.bounds(name, values)
                except ValueError as exc:
                    raise self._error(str(exc), self._line(name)) from None
                for end, label in ((ends[0], "its min"), (ends[1], "its max")):
                    trial = self._with(values, name, end)
                    if trial is None:
                        continue
                    problems = self.settle(trial)
                    if not any(p.kind == "constraint" for p in problems):
                        self._raise_for(problems, trial, f"{name} = {end} ({label})")

    def _with(self, values: Mapping[str, object], name: str, size: int) -> dict[str, object] | None:
        """`values` with drawn dim `name` at `size`, and the drawn dims whose range or typical sizes read it
        re-chosen: their first typical size inside their new range, else the nearest end of it."""
        trial: dict[str, object] = {k: v for k, v in values.items() if k in self.free_kwargs}
        for dim in self.free_dims:
            if dim == name:
                trial[dim] = size
                continue
            if not self._reads(dim, name):
                trial[dim] = values[dim]
                continue
            try:
                low, high = self.bounds(dim, trial)
                typical = [t for t in self.typical(dim, trial) if low <= t <= high]
            except (ValueError, KeyError):
                return None
            if high < low:
                return None
            current = values[dim]
            if not isinstance(current, SupportsInt):
                raise TypeError(f"dim {dim} = {current!r} is not a size")
            trial[dim] = typical[0] if typical else min(max(int(current), low), high)
        return trial

    def _reads(self, name: str, other: str) -> bool:
        """Whether `name` depends on `other`, directly or through other values."""
        pending, seen = list(self.deps(name)), set()
        while pending:
            dep = pending.pop()
            if dep == other:
                return True
            if dep not in seen:
                seen.add(dep)
                pending.extend(self.deps(dep))
        return False

    def _raise_for(self, problems: list[Problem], values: Mapping[str, object], where: str) -> None:
        for problem in problems:
            if problem.kind != "constraint":
                raise self._error(
                    f"{problem.message} with {where} ({_show(values, self)}); add a constraint that excludes "
                    "such cases or change the sizes",
                    problem.line or self._line(problem.name),
                )

    def first_valid(self) -> dict[str, object]:
        """The first combination of typical sizes that meets every constraint, settled."""
        for values in self.typical_assignments():
            if not self.settle(values):
                return values
        return {}

    def static_dims(self) -> tuple[DimSpec, ...]:
        """The dims with static estimates filled in for expression parts, at the first valid combination of the
        typical sizes: a derived dim's value becomes its `typical`; a drawn dim's expression ends and typical
        sizes their values (the expressions stay, and decide per case)."""
        if self.literal:
            return tuple(self.dims.values())
        base = self.first_valid()
        result = []
        for dim in self.dims.values():
            if dim.is_derived:
                value = base.get(dim.name)
                result.append(replace(dim, typical=(value if isinstance(value, int) else 0,)))
                continue
            if not (dim.min_expr or dim.max_expr or dim.typical_terms):
                result.append(dim)
                continue
            try:
                low, high = self.bounds(dim.name, base)
                typical = self.typical(dim.name, base)
            except ValueError:
                low, high, typical = dim.low, dim.high, dim.typical
            result.append(
                replace(
                    dim,
                    typical=tuple(typical) or dim.typical,
                    low=min(low, dim.low),
                    high=max(high, dim.high),
                )
            )
        return tuple(result)


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _show(values: Mapping[str, object], schema: Schema) -> str:
    shown = [f"{k} = {v!r}" for k, v in values.items() if k in schema.dims or k in schema.free_kwargs]
    return ", ".join(shown) or "no dims"


def integer_value(text: str, values: Mapping[str, object]) -> int:
    """An expression over dims (an input's `low` or `high`) as a whole number; ValueError when it is not one."""
    try:
        value = evaluate(parse_expression(text), values)
    except ExpressionError as exc:
        raise ValueError(f"{text!r}: {exc}") from None
    if value.denominator != 1:
        raise ValueError(f"{text!r} is {float(value):g} here, not a whole number (use //)")
    return int(value)


_CACHE: dict[int, tuple[OpShapes, Schema]] = {}


def schema_of(op_name: str, shapes: OpShapes, op_line: int | None = None) -> Schema:
    """The Schema of an op's shapes, built once per OpShapes object."""
    cached = _CACHE.get(id(shapes))
    if cached is not None and cached[0] is shapes:
        return cached[1]
    schema = Schema(op_name, shapes, op_line)
    _CACHE[id(shapes)] = (shapes, schema)
    return schema
