"""The shape half of an op's schema: symbolic dims, inputs (and their value kinds), kwargs to fuzz, dim
constraints, and upstream's builtin schemas."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from enum import StrEnum
from typing import Any, TypeGuard, TypeVar

from gpuemu_ci import dtypes as dtype_table
from gpuemu_ci.config.expressions import ExpressionError, parse_expression
from gpuemu_ci.config.model import DimConstraint, DimSpec, InputSpec, Layout, ValueKind
from gpuemu_ci.config.reader import SourceText, TableReader
from gpuemu_ci.errors import ConfigError

E = TypeVar("E", bound=StrEnum)
DIM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def canonical_dtype(name: str) -> str:
    """The dtype's canonical name (upstream's spellings accepted); unknown names unchanged."""
    return dtype_table.canonical(name) or name


def check_dtype(name: str, where: str, source: SourceText, line: int | None = None) -> None:
    """A ConfigError (with the closest known name) where the dtype is unknown."""
    if dtype_table.canonical(name) is None:
        import difflib

        close = difflib.get_close_matches(name, list(dtype_table.DTYPES), n=1)
        hint = f" (did you mean `{close[0]}`?)" if close else ""
        raise ConfigError(
            f"`{where}`: unknown dtype {name!r}{hint}. Known: {', '.join(dtype_table.DTYPES)}.",
            path=source.path,
            line=line,
        )


# gpuemu's own builtin schemas, reachable by `schema = "<name>"`.
BUILTIN_SCHEMAS: dict[str, tuple[dict[str, tuple[int, ...]], dict[str, tuple[str, ...]], tuple[str, ...]]] = {
    "matmul": (
        {"M": (1, 2, 7, 31, 128, 257), "K": (1, 3, 16, 127, 256), "N": (1, 2, 15, 64, 255)},
        {"a": ("M", "K"), "b": ("K", "N")},
        ("M", "N"),
    ),
    "attention": (
        {"B": (1, 2, 5), "H": (1, 3, 8), "S": (1, 2, 17, 128, 257), "D": (8, 16, 64, 65)},
        {"q": ("B", "H", "S", "D"), "k": ("B", "H", "S", "D"), "v": ("B", "H", "S", "D")},
        ("B", "H", "S", "D"),
    ),
    "elementwise": (
        {"B": (1, 2, 8, 33), "S": (1, 7, 128, 513), "H": (1, 3, 256, 1025)},
        {"input": ("B", "S", "H")},
        ("B", "S", "H"),
    ),
}
# Dims used when an op lists input names but declares no dims: every input gets [B, S, H].
DEFAULT_DIMS = {"B": (1, 2, 8), "S": (7, 64, 128), "H": (3, 256, 1024)}


def dims_table(table: TableReader, key: str) -> dict[str, DimSpec]:
    """[ops.dims]: sizes, ranges whose ends and typical sizes may name other dims, and derived dims (a string:
    an expression over dims and kwargs). Names and cycles are checked once every part of the op is read
    (config/dimgraph.py)."""
    sub = table.table(key)
    if sub is None:
        return {}
    dims: dict[str, DimSpec] = {}
    for name in list(sub._data):
        if not DIM_NAME.match(name):
            raise sub.error(name, "dim names are identifiers like M, K, seq_len")
        dims[name] = _dim(sub, name)
    sub.finish()
    return dims


def _size(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _expression(table: TableReader, key: str, text: str, what: str) -> str:
    """A validated arithmetic expression (names are checked later, against every dim and kwarg)."""
    try:
        return parse_expression(text).text
    except ExpressionError as exc:
        raise table.error(key, f"{what}: {exc}") from None


def _dim(table: TableReader, name: str) -> DimSpec:
    value = table.raw(name)
    line = table.line_of(name)
    if isinstance(value, bool):
        raise table.error(name, "expected sizes: a list, an integer, an expression or { min, max, typical }")
    if isinstance(value, str):
        expr = _expression(table, name, value, "a derived dim is an expression over dims and kwargs")
        return DimSpec(name, (), low=0, high=0, derived=expr, line=line)
    if _size(value):
        # A bare size pins the dim (`D = 64`: a head dim, a fixed channel count): only that size is drawn.
        # A list of one size (`D = [64]`) is a typical size, with the sizes below it explored.
        if value < 0:
            raise table.error(name, "expected a size >= 0")
        return DimSpec(name, (value,), low=value, high=value, line=line)
    if isinstance(value, list):
        if not value or not all(_size(v) and v >= 0 for v in value):
            raise table.error(name, "expected a non-empty list of sizes >= 0")
        typical = tuple(value)
        return DimSpec(name, typical, low=min(1, min(typical)), high=max(typical), line=line)
    if isinstance(value, dict):
        sub = TableReader(value, f"{table.where}.{name}", table.source, line)
        low_raw, high_raw = sub.raw("min"), sub.raw("max")
        typical_raw = sub.raw("typical")
        derived_raw = sub.raw("expr")
        sub.finish()
        ends: dict[str, int | str | None] = {}
        for end_key, raw in (("min", low_raw), ("max", high_raw)):
            if raw is None or (_size(raw) and raw >= 0):
                ends[end_key] = raw
            elif isinstance(raw, str):
                ends[end_key] = _expression(table, name, raw, f"`{end_key}`")
            else:
                raise table.error(name, f"`{end_key}` must be a size >= 0 or an expression naming dims")
        if derived_raw is not None:
            if not isinstance(derived_raw, str):
                raise table.error(name, '`expr` is an expression over dims and kwargs, e.g. "G * CPG"')
            if typical_raw is not None:
                raise table.error(name, "a derived dim (`expr`) has no typical sizes of its own")
            expr = _expression(table, name, derived_raw, "`expr`")
            low, high = ends["min"], ends["max"]
            return DimSpec(
                name,
                (),
                low=low if isinstance(low, int) else 0,
                high=high if isinstance(high, int) else 0,
                derived=expr,
                min_expr=low if isinstance(low, str) else None,
                max_expr=high if isinstance(high, str) else None,
                line=line,
            )
        terms = _typical_terms(table, name, typical_raw)
        if ends["min"] is None and ends["max"] is None and not terms:
            raise table.error(name, "give `min` and `max`, or `typical` sizes")
        sizes = [t for t in terms if isinstance(t, int)]
        low_end, high_end = ends["min"], ends["max"]
        low = low_end if isinstance(low_end, int) else min([1, *sizes])
        high = high_end if isinstance(high_end, int) else max([low, *sizes])
        if isinstance(low_end, int) and isinstance(high_end, int) and low > high:
            raise table.error(name, f"min ({low}) is greater than max ({high})")
        outside = [v for v in sizes if not low <= v <= high]
        if outside and isinstance(low_end, int | None) and isinstance(high_end, int | None):
            raise table.error(name, f"typical sizes {outside} lie outside [{low}, {high}]")
        typical = tuple(sizes) or (() if len(sizes) < len(terms) else tuple(sorted({low, high})))
        return DimSpec(
            name,
            typical,
            low=low,
            high=high,
            min_expr=low_end if isinstance(low_end, str) else None,
            max_expr=high_end if isinstance(high_end, str) else None,
            typical_terms=terms if any(isinstance(t, str) for t in terms) else (),
            line=line,
        )
    raise table.error(name, "expected sizes: a list, an integer, an expression or { min, max, typical }")


def _typical_terms(table: TableReader, name: str, raw: object) -> tuple[int | str, ...]:
    """`typical`: a size, an expression, or a list of them (`typical = ["D", 64]`)."""
    if raw is None:
        return ()
    items = raw if isinstance(raw, list) else [raw]
    terms: list[int | str] = []
    for item in items:
        if _size(item) and item >= 0:
            terms.append(item)
        elif isinstance(item, str):
            terms.append(_expression(table, name, item, "`typical`"))
        else:
            raise table.error(name, "`typical` must be sizes >= 0 or expressions naming dims")
    return tuple(terms)


# 2^36 elements (128 GiB in bfloat16): larger than any machine the gate runs on can hold for one input.
MAX_FIXED_ELEMENTS = 1 << 36


def dim_list(table: TableReader, key: str, value: Any) -> tuple[str | int, ...]:
    """A list of dim names and integer sizes; a config error otherwise."""
    if not isinstance(value, list) or not all(
        (isinstance(v, str) and DIM_NAME.match(v)) or (isinstance(v, int) and not isinstance(v, bool))
        for v in value
    ):
        raise table.error(key, 'expected a list of dim names or sizes, e.g. ["M", "K"]')
    if any(v < 0 for v in value if isinstance(v, int)):
        raise table.error(key, f"{value}: a size cannot be negative")
    fixed = math.prod(v for v in value if isinstance(v, int))
    if fixed > MAX_FIXED_ELEMENTS:
        raise table.error(
            key,
            f"{value}: the literal sizes alone make {fixed:,} elements; no case of more than "
            f"{MAX_FIXED_ELEMENTS:,} elements per input can be run (name the dim and give it a range instead)",
        )
    return tuple(value)


def parse_inputs(
    table: TableReader, dims: dict[str, DimSpec], schema_inputs: dict[str, tuple[str, ...]] | None
) -> tuple[tuple[InputSpec, ...], str | None]:
    """Inputs as a list of names, a table name -> dims, or a table name -> { dims, dtype, kind, ... }.

    A string is a hook "pkg.mod:make_inputs" that builds the arrays itself (names then come from `input_names`
    of the hook's result, so the schema must still list them via dims)."""
    spelled = "inputs" if table.has("inputs") else "input_names"
    raw = table.raw("inputs")
    if raw is None:
        if schema_inputs is not None:
            return tuple(InputSpec(n, d) for n, d in schema_inputs.items()), None
        raise table.error(
            "inputs",
            'is required: the op\'s input names, e.g. inputs = ["x"], or their dims, '
            'e.g. [ops.inputs] a = ["M", "K"]',
        )
    if isinstance(raw, str):
        if ":" not in raw:
            raise table.error(spelled, 'a string here is an inputs hook "pkg.mod:function"')
        names = schema_inputs or {}
        return tuple(InputSpec(n, d) for n, d in names.items()), raw
    if isinstance(raw, list):
        if not raw or not all(isinstance(v, str) and v for v in raw):
            raise table.error(spelled, "expected a non-empty list of input names")
        if len(set(raw)) != len(raw):
            raise table.error(spelled, "input names must be unique")
        default = tuple(DEFAULT_DIMS) if not dims else None
        if default is None:
            raise table.error(spelled, 'with [ops.dims] give each input\'s dims: [ops.inputs] x = ["M", "N"]')
        return tuple(InputSpec(n, default) for n in raw), None
    if isinstance(raw, dict):
        specs = []
        for name, value in raw.items():
            if isinstance(value, list):
                specs.append(InputSpec(name, dim_list(table, spelled, value)))
                continue
            if not isinstance(value, dict):
                raise table.error(spelled, f"input `{name}`: expected dims or a table")
            sub = TableReader(value, f"{table.where}.inputs.{name}", table.source, table.line_of(spelled))
            input_dims = dim_list(sub, "dims", sub.raw("dims"))
            dtype = sub.string("dtype")
            if dtype is not None:
                check_dtype(dtype, f"{sub.where}.dtype", table.source, sub.line)
                dtype = canonical_dtype(dtype)
            kind = sub.choice("kind", ValueKind, ValueKind.ANY)
            low = _bound(sub, "low")
            high = _bound(sub, "high")
            ignore = sub.integer("ignore_value", None)
            layouts = sub.string_list("layouts")
            sub.finish()
            if kind is ValueKind.INDEX and high is None:
                raise sub.error(
                    "high", 'index inputs need `high` (an integer or a dim name, e.g. high = "V")'
                )
            specs.append(
                InputSpec(
                    name,
                    input_dims,
                    dtype,
                    kind,
                    low,
                    high,
                    ignore,
                    enum_list(sub, "layouts", layouts, Layout) if layouts else None,
                )
            )
        return tuple(specs), None
    raise table.error(spelled, "expected a list of names or a table of inputs")


def _bound(table: TableReader, key: str) -> int | str | None:
    value = table.raw(key)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, str):
        return _expression(table, key, value, "an integer, a dim name or an expression over dims")
    raise table.error(key, "expected an integer, a dim name or an expression over dims")


def enum_list(table: TableReader, key: str, values: tuple[str, ...], enum: type[E]) -> tuple[E, ...]:
    """The values as members of `enum`; a config error naming the members otherwise."""
    members = [m.value for m in enum]
    for value in values:
        if value not in members:
            raise table.error(key, f"unknown value {value!r}; expected some of {', '.join(members)}")
    return tuple(enum(v) for v in values)


def kwargs_table(
    table: TableReader, dim_names: Iterable[str]
) -> tuple[tuple[tuple[str, tuple[object, ...]], ...], tuple[tuple[str, str], ...]]:
    """`kwargs = { eps = 1e-5, axis = [-1, 0], num_groups = "G" }`: a list is a set of values to fuzz over (wrap
    a list value in a list to pass it as one value); a string that names a dim binds the kwarg to that dim or to
    an expression over dims (`"G"`, `"L // 2"`). Returns (fuzzed kwargs, bound kwargs)."""
    sub = table.table("kwargs")
    if sub is None:
        return (), ()
    dims = set(dim_names)
    fuzzed = []
    bound = []
    for key in list(sub._data):
        value = sub.raw(key)
        if isinstance(value, str) and _names_a_dim(value, dims):
            bound.append((key, _expression(sub, key, value, "a kwarg bound to dims")))
            continue
        candidates = tuple(value) if isinstance(value, list) else (value,)
        if not candidates:
            raise sub.error(key, "an empty list gives nothing to call the op with")
        fuzzed.append((key, candidates))
    sub.finish()
    return tuple(fuzzed), tuple(bound)


def _names_a_dim(text: str, dims: set[str]) -> bool:
    """Whether a kwarg's string value is an expression over dims (else it is passed as a string)."""
    try:
        return bool(parse_expression(text).names & dims)
    except ExpressionError:
        return False


def parse_constraint(table: TableReader, text: str) -> DimConstraint:
    """A condition over dims and kwargs; its names are checked with the rest of the schema."""
    try:
        parse_expression(text, logic=True)
    except ExpressionError as exc:
        raise table.error(
            "constraints",
            f'{exc}. A constraint is a condition such as "D % 2 == 0", "R <= D", "CB in (1, B)"',
        ) from None
    return DimConstraint(text.strip(), table.line_of("constraints"))
