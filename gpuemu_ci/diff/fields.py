"""Typed access to JSON documents that came from a file: a wrong or missing field is a FormatError naming
its path (`ops[2].dtypes[0].worst_headroom`), never a KeyError or TypeError deep in the diff."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

_MISSING = object()


class FormatError(ValueError):
    """A document does not have the shape this version reads."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}" if where else problem)
        self.where = where
        self.problem = problem


def _join(where: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{where}[{key}]"
    return f"{where}.{key}" if where else key


def table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise FormatError(where, f"expected an object, found {_kind(value)}")
    return value


def items(obj: dict[str, Any], key: str, where: str, *, required: bool = True) -> Iterator[tuple[str, Any]]:
    """(path, element) for each element of the list at obj[key]; an absent optional list is empty."""
    value = obj.get(key, _MISSING)
    if value is _MISSING or (value is None and not required):
        if required:
            raise FormatError(_join(where, key), "missing")
        return iter(())
    if not isinstance(value, list):
        raise FormatError(_join(where, key), f"expected a list, found {_kind(value)}")
    path = _join(where, key)
    return ((_join(path, i), element) for i, element in enumerate(value))


def string(obj: dict[str, Any], key: str, where: str, *, required: bool = False) -> str | None:
    value = obj.get(key)
    if value is None:
        if required:
            raise FormatError(_join(where, key), "missing")
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # versions written as numbers by hand ("generator_version": 2)
    if not isinstance(value, str):
        raise FormatError(_join(where, key), f"expected a string, found {_kind(value)}")
    return value


def integer(obj: dict[str, Any], key: str, where: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise FormatError(_join(where, key), f"expected an integer, found {_kind(value)}")
    return value


def number(obj: dict[str, Any], key: str, where: str) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FormatError(_join(where, key), f"expected a number, found {_kind(value)}")
    if not math.isfinite(value):  # results.json never holds NaN/Infinity; a hand-edited file might
        raise FormatError(_join(where, key), f"expected a finite number, found {value}")
    return float(value)


def flag(obj: dict[str, Any], key: str, where: str) -> bool:
    value = obj.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise FormatError(_join(where, key), f"expected true or false, found {_kind(value)}")
    return value


def optional_table(obj: dict[str, Any], key: str, where: str) -> dict[str, Any] | None:
    value = obj.get(key)
    if value is None:
        return None
    return table(value, _join(where, key))


def string_list(obj: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    out = []
    for path, element in items(obj, key, where, required=False):
        if not isinstance(element, str):
            raise FormatError(path, f"expected a string, found {_kind(element)}")
        out.append(element)
    return tuple(out)


def count_total(obj: dict[str, Any], key: str, where: str) -> int | None:
    """The sum of an opcode -> count mapping (None when absent)."""
    value = obj.get(key)
    if value is None:
        return None
    counts = table(value, _join(where, key))
    total = 0
    for opcode, n in counts.items():
        if isinstance(n, bool) or not isinstance(n, int):
            raise FormatError(_join(_join(where, key), opcode), f"expected an integer, found {_kind(n)}")
        total += n
    return total


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__
    )
