"""Strict, typed access to one TOML table: every key read is recorded, leftovers are errors.

`TableReader.finish()` raises a ConfigError naming the unknown key, its line, and the closest valid key, so a
misspelling never silently neutralises the gate (upstream gpuemu ignores unknown keys).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from gpuemu_ci.errors import ConfigError

T = TypeVar("T")


@dataclass(frozen=True)
class SourceText:
    """The config file's path and lines, for line numbers in messages."""

    path: str
    lines: tuple[str, ...]

    def header_lines(self, header: str) -> list[int]:
        """1-based lines of every `[header]` / `[[header]]` line, in file order."""
        pattern = re.compile(r"^\s*\[\[?\s*" + re.escape(header) + r"\s*\]\]?\s*(#.*)?$")
        return [i + 1 for i, text in enumerate(self.lines) if pattern.match(text)]

    def key_line(self, key: str, start: int | None, end: int | None = None) -> int | None:
        """Line of `key = ...` inside [start, end); `start` is the table header's line (None: top of file)."""
        pattern = re.compile(r"^\s*(" + re.escape(key) + r'|"' + re.escape(key) + r'")\s*[=.]')
        first = start or 1
        last = end if end is not None else len(self.lines) + 1
        for number in range(first, last):
            if pattern.match(self.lines[number - 1]):
                return number
        return start


class TableReader:
    """Reads one table; `where` is its dotted name for messages, `line` the line of its header."""

    def __init__(
        self,
        data: Mapping[str, Any],
        where: str,
        source: SourceText,
        line: int | None = None,
        end_line: int | None = None,
        aliases: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(data, Mapping):
            raise ConfigError(
                f"`{where}` must be a table, got {_type_name(data)}", path=source.path, line=line
            )
        self.where = where
        self.source = source
        self.line = line
        self.end_line = end_line
        self.aliases = dict(aliases or {})
        self._data = dict(data)
        self._allowed: set[str] = set()
        self._consumed: set[str] = set()

    # --- location and errors -------------------------------------------------------------------------
    def line_of(self, key: str) -> int | None:
        return self.source.key_line(key, self.line, self.end_line)

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"`{self.where}.{key}`: {message}", path=self.source.path, line=self.line_of(key))

    # --- raw access ----------------------------------------------------------------------------------
    def _take(self, key: str) -> tuple[str, Any]:
        """Returns (spelling used, value) honouring aliases; both spellings at once is an error."""
        self._allowed.add(key)
        spellings = [key] + [alias for alias, canonical in self.aliases.items() if canonical == key]
        self._allowed.update(spellings)
        present = [s for s in spellings if s in self._data]
        if len(present) > 1:
            raise self.error(present[1], f"`{present[0]}` and `{present[1]}` mean the same; keep one")
        if not present:
            return key, _MISSING
        self._consumed.add(present[0])
        return present[0], self._data[present[0]]

    def has(self, key: str) -> bool:
        spellings = [key] + [a for a, c in self.aliases.items() if c == key]
        return any(s in self._data for s in spellings)

    def names(self) -> list[str]:
        """The table's keys as written (a table of user-named entries: `[ops.intermediates.<name>]`)."""
        return [str(key) for key in self._data]

    def raw(self, key: str, default: Any = None) -> Any:
        _, value = self._take(key)
        return default if value is _MISSING else value

    # --- typed getters -------------------------------------------------------------------------------
    def string(self, key: str, default: str | None = None, *, required: bool = False) -> str | None:
        spelled, value = self._take(key)
        if value is _MISSING:
            if required:
                raise ConfigError(f"`{self.where}` needs `{key}`", path=self.source.path, line=self.line)
            return default
        if not isinstance(value, str):
            raise self.error(spelled, f"expected a string, got {_type_name(value)}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        spelled, value = self._take(key)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            raise self.error(spelled, f"expected true or false, got {_type_name(value)}")
        return value

    def integer(self, key: str, default: int | None, *, minimum: int | None = None) -> int | None:
        spelled, value = self._take(key)
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(spelled, f"expected an integer, got {_type_name(value)}")
        if minimum is not None and value < minimum:
            raise self.error(spelled, f"must be at least {minimum}, got {value}")
        return value

    def number(self, key: str, default: float | None, *, positive: bool = False) -> float | None:
        spelled, value = self._take(key)
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(spelled, f"expected a number, got {_type_name(value)}")
        if positive and not value > 0:
            raise self.error(spelled, f"must be greater than 0, got {value}")
        return float(value)

    def string_list(self, key: str, default: Iterable[str] | None = None) -> tuple[str, ...] | None:
        spelled, value = self._take(key)
        if value is _MISSING:
            return tuple(default) if default is not None else None
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(spelled, "expected a list of strings")
        return tuple(value)

    def choice(self, key: str, enum: type[T], default: T) -> T:
        spelled, value = self._take(key)
        if value is _MISSING:
            return default
        members = [m.value for m in enum]  # type: ignore[attr-defined]
        if value not in members:
            raise self.error(
                spelled,
                f"unknown value {value!r}; expected one of {_or_list(members)}"
                + _suggest(str(value), members),
            )
        return enum(value)  # type: ignore[call-arg]

    def table(self, key: str, aliases: Mapping[str, str] | None = None) -> TableReader | None:
        spelled, value = self._take(key)
        if value is _MISSING:
            return None
        return TableReader(
            value, f"{self.where}.{spelled}", self.source, self.line_of(spelled), self.end_line, aliases
        )

    # --- closing ------------------------------------------------------------------------------------
    def expect_keys(self, keys: Iterable[str]) -> None:
        """Declares the valid keys up front so a misspelling is reported before any "missing key" error
        (a missing `inputs` is usually a misspelled one)."""
        self._allowed.update(keys)
        self._allowed.update(self.aliases)
        self.finish()

    def finish(self) -> None:
        unknown = [k for k in self._data if k not in self._consumed and k not in self._allowed]
        if unknown:
            key = unknown[0]
            valid = sorted(k for k in self._allowed if k not in self.aliases)
            raise ConfigError(
                f"unknown key `{key}` in `{self.where}`"
                + _suggest(key, sorted(self._allowed))
                + f" Valid keys: {', '.join(valid)}.",
                path=self.source.path,
                line=self.line_of(key),
            )


class _Missing:
    pass


_MISSING = _Missing()


def _type_name(value: Any) -> str:
    names = {
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        list: "a list",
        dict: "a table",
    }
    return names.get(type(value), type(value).__name__)


def _or_list(values: Iterable[str]) -> str:
    quoted = [f'"{v}"' for v in values]
    return ", ".join(quoted[:-1]) + " or " + quoted[-1] if len(quoted) > 1 else quoted[0]


def _suggest(word: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)." if close else "."
