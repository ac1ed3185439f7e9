"""The shape half of an op's schema: symbolic dims, inputs (and their value kinds), kwargs to fuzz, dim
constraints, and upstream's builtin schemas."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any, TypeVar

from gpuemu_ci import dtypes as dtype_table
from gpuemu_ci.config.model import DimSpec, InputSpec, Layout, ValueKind
from gpuemu_ci.config.reader import SourceText, TableReader
from gpuemu_ci.errors import ConfigError

E = TypeVar("E", bound=StrEnum)
DIM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def canonical_dtype(name: str) -> str:
    return dtype_table.canonical(name) or name


def check_dtype(name: str, where: str, source: SourceText, line: int | None = None) -> None:
    if dtype_table.canonical(name) is None:
        import difflib

        close = difflib.get_close_matches(name, list(dtype_table.DTYPES), n=1)
        hint = f" (did you mean `{close[0]}`?)" if close else ""
        raise ConfigError(
            f"`{where}`: unknown dtype {name!r}{hint}. Known: {', '.join(dtype_table.DTYPES)}.",
            path=source.path,
            line=line,
        )


# Upstream's builtin schemas (research gpuemu-upstream.md §4.3), reachable by `schema = "<name>"`.
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


def _dim(table: TableReader, name: str) -> DimSpec:
    value = table.raw(name)
    if isinstance(value, bool):
        raise table.error(name, "expected sizes: a list, an integer or { min, max, typical }")
    if isinstance(value, int):
        value = [value]
    if isinstance(value, list):
        if not value or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
            raise table.error(name, "expected a non-empty list of sizes >= 0")
        typical = tuple(value)
        return DimSpec(name, typical, low=min(1, min(typical)), high=max(typical))
    if isinstance(value, dict):
        sub = TableReader(value, f"{table.where}.{name}", table.source, table.line_of(name))
        low = sub.integer("min", None, minimum=0)
        high = sub.integer("max", None, minimum=0)
        typical_raw = sub.raw("typical")
        sub.finish()
        if typical_raw is None:
            typical_list = []
        elif isinstance(typical_raw, int) and not isinstance(typical_raw, bool):
            typical_list = [typical_raw]
        elif isinstance(typical_raw, list) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in typical_raw
        ):
            typical_list = list(typical_raw)
        else:
            raise table.error(name, "`typical` must be a size or a list of sizes")
        if low is None and high is None and not typical_list:
            raise table.error(name, "give `min` and `max`, or `typical` sizes")
        low = low if low is not None else min([1, *typical_list])
        high = high if high is not None else max([low, *typical_list])
        if low > high:
            raise table.error(name, f"min ({low}) is greater than max ({high})")
        outside = [v for v in typical_list if not low <= v <= high]
        if outside:
            raise table.error(name, f"typical sizes {outside} lie outside [{low}, {high}]")
        typical = tuple(typical_list) or tuple(sorted({low, high}))
        return DimSpec(name, typical, low=low, high=high)
    raise table.error(name, "expected sizes: a list, an integer or { min, max, typical }")


def dim_list(table: TableReader, key: str, value: Any) -> tuple[str | int, ...]:
    if not isinstance(value, list) or not all(
        (isinstance(v, str) and DIM_NAME.match(v)) or (isinstance(v, int) and not isinstance(v, bool))
        for v in value
    ):
        raise table.error(key, 'expected a list of dim names or sizes, e.g. ["M", "K"]')
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
    if isinstance(value, str) and DIM_NAME.match(value):
        return value
    raise table.error(key, "expected an integer or a dim name")


def enum_list(table: TableReader, key: str, values: tuple[str, ...], enum: type[E]) -> tuple[E, ...]:
    members = [m.value for m in enum]
    for value in values:
        if value not in members:
            raise table.error(key, f"unknown value {value!r}; expected some of {', '.join(members)}")
    return tuple(enum(v) for v in values)


def kwargs_table(table: TableReader) -> tuple[tuple[str, tuple[object, ...]], ...]:
    """`kwargs = { eps = 1e-5, axis = [-1, 0] }`: a list is a set of values to fuzz over (wrap a list value in a
    list to pass it as one value)."""
    sub = table.table("kwargs")
    if sub is None:
        return ()
    result = []
    for key in list(sub._data):
        value = sub.raw(key)
        candidates = tuple(value) if isinstance(value, list) else (value,)
        if not candidates:
            raise sub.error(key, "an empty list gives nothing to call the op with")
        result.append((key, candidates))
    sub.finish()
    return tuple(result)


CONSTRAINT = re.compile(r"^\s*([A-Za-z_]\w*(?:\s*%\s*\d+)?)\s*(==|!=|<=|>=|<|>)\s*([A-Za-z_]\w*|\d+)\s*$")


def check_constraint(table: TableReader, text: str, dims: dict[str, DimSpec]) -> None:
    match = CONSTRAINT.match(text)
    if not match:
        raise table.error("constraints", f'{text!r} is not a constraint like "D % 2 == 0" or "R <= D"')
    for token in re.findall(r"[A-Za-z_]\w*", text):
        if token not in dims:
            raise table.error("constraints", f"{text!r} names {token!r}, which is not a declared dim")
