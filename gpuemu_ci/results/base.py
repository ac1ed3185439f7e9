"""The base class of every part of the results document, its constrained scalars, and the rules they share."""

from __future__ import annotations

import math
import re
import sys
from enum import StrEnum
from typing import Annotated, Any

import msgspec

# Constrained scalars: what a field may hold, checked when a document is read and stated in the JSON Schema.
Count = Annotated[int, msgspec.Meta(ge=0)]
# msgspec states no bound past int64 in a schema: the top of the range is checked by `check_seed`.
Seed = Annotated[int, msgspec.Meta(ge=0, description="an unsigned 64-bit integer")]
SEED_LIMIT = 2**64
Sha256 = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]


class Record(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A frozen, typed part of results.json. Unknown fields are an error when a document is read, so a
    misspelt or forged field is never silently ignored.

    No string in a record holds a lone surrogate (an op's exception text, a path that is not UTF-8): each
    becomes U+FFFD when the record is built, so that results.json and every report can be written as UTF-8.
    Subclasses with a `__post_init__` of their own call this one."""

    def __post_init__(self) -> None:
        for name in self.__struct_fields__:
            value = getattr(self, name)
            clean = without_surrogates(value)
            if clean is not value:
                msgspec.structs.force_setattr(self, name, clean)


_SURROGATE = re.compile("[\ud800-\udfff]")


def without_surrogates(value: Any) -> Any:
    """`value` with every lone surrogate in its strings (keys too, through tuples, lists and dicts) replaced
    by U+FFFD; the very same object when there is none. Records are left to their own `__post_init__`."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value) if _SURROGATE.search(value) else value
    if isinstance(value, tuple | list):
        items = [without_surrogates(v) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return type(value)(items)
    if isinstance(value, dict):
        pairs = [(without_surrogates(k), without_surrogates(v)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(pairs, value.items(), strict=True)):
            return value
        return dict(pairs)
    return value


def json_float(value: float | None) -> float | None:
    """JSON has no NaN or Infinity: NaN -> None, +-inf -> the largest double with its sign."""
    if value is None or math.isnan(value):
        return None
    if math.isinf(value):
        return math.copysign(sys.float_info.max, value)
    return float(value)


class Severity(StrEnum):
    """How much a finding weighs, for lint violations and baseline-diff entries alike. ERROR fails the gate
    (a diff regression: when fail_on_regression is on); WARNING is shown prominently and never fails, e.g. a
    check that could not be carried out, so it never passes silently; INFO is context."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def check_seed(value: int, what: str) -> None:
    """Seeds are unsigned 64-bit integers (a ValueError otherwise, which a read reports at the record)."""
    if value >= SEED_LIMIT:
        raise ValueError(f"{what} {value} does not fit in 64 bits")
