"""Strict, typed access to one TOML table: every key read is recorded, leftovers are errors.

`TableReader.finish()` raises a ConfigError naming the unknown key, its line, and the closest valid key, so a
misspelling never silently neutralises the gate (upstream gpuemu ignores unknown keys).
"""

from __future__ import annotations

import bisect
import contextlib
import difflib
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from gpuemu_ci.errors import ConfigError

T = TypeVar("T")
E = TypeVar("E", bound=Enum)  # a setting spelled as one of an enum's values


@dataclass(frozen=True)
class SourceText:
    """The config file's path and lines, for line numbers in messages."""

    path: str
    lines: tuple[str, ...]

    # Both indexes below are built once, in one pass over the file: a config of many ops asks for the same
    # few keys in every table, and a scan per question made loading grow with the file's size per op.
    @functools.cached_property
    def headers(self) -> tuple[tuple[int, str], ...]:
        """(1-based line, text without leading blanks) of every line that starts a table header, in order."""
        return tuple(
            (i + 1, text.lstrip()) for i, text in enumerate(self.lines) if text.lstrip().startswith("[")
        )

    @functools.cached_property
    def _key_lines(self) -> dict[str, list[int]]:
        """Every key that starts a line (`key = ...`, `"key" = ...`, `key.sub = ...`) -> its lines, in order."""
        index: dict[str, list[int]] = {}
        for number, text in enumerate(self.lines, start=1):
            found = _LINE_KEY.match(text)
            if found:
                index.setdefault(found.group(1) if found.group(1) is not None else found.group(2), []).append(
                    number
                )
        return index

    def header_lines(self, header: str) -> list[int]:
        """1-based lines of every `[header]` / `[[header]]` line, in file order."""
        pattern = re.compile(r"^\[\[?\s*" + re.escape(header) + r"\s*\]\]?\s*(#.*)?$")
        return [number for number, text in self.headers if pattern.match(text)]

    def key_line(self, key: str, start: int | None, end: int | None = None) -> int | None:
        """Line of `key = ...` inside [start, end); `start` is the table header's line (None: top of file)."""
        first = start or 1
        last = end if end is not None else len(self.lines) + 1
        lines = self._key_lines.get(key, ())
        at = bisect.bisect_left(lines, first)
        return lines[at] if at < len(lines) and lines[at] < last else start


# A key at the start of a line: quoted (group 1) or bare (group 2), then `=` or a dot (a dotted key).
_LINE_KEY = re.compile(r'^\s*(?:"([^"]*)"|([^\s=."\[#]+))\s*[=.]')


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
        self._aliases: dict[str, str] = {}
        self._spellings: dict[str, tuple[str, ...]] = {}  # canonical key -> its aliases
        self._data = dict(data)
        self._allowed: set[str] = set()
        self._consumed: set[str] = set()
        if aliases:
            self.add_aliases(aliases)

    @property
    def aliases(self) -> Mapping[str, str]:
        """Other spellings of keys: alias -> canonical key."""
        return self._aliases

    def add_aliases(self, aliases: Mapping[str, str]) -> None:
        """Accept these other spellings of keys (alias -> canonical name)."""
        self._aliases.update(aliases)
        spellings: dict[str, tuple[str, ...]] = {}
        for alias, canonical in self._aliases.items():
            spellings[canonical] = (*spellings.get(canonical, ()), alias)
        self._spellings = spellings

    # --- location and errors -------------------------------------------------------------------------
    def line_of(self, key: str) -> int | None:
        """The line of gpuemu.toml where the key is written, if known."""
        return self.source.key_line(key, self.line, self.end_line)

    def error(self, key: str, message: str) -> ConfigError:
        """A ConfigError about one key of this table, with its file and line."""
        return ConfigError(f"`{self.where}.{key}`: {message}", path=self.source.path, line=self.line_of(key))

    # --- raw access ----------------------------------------------------------------------------------
    def _take(self, key: str) -> tuple[str, Any]:
        """Returns (spelling used, value) honouring aliases; both spellings at once is an error."""
        self._allowed.add(key)
        others = self._spellings.get(key, ())
        if not others:  # most keys have no alias: one lookup
            if key not in self._data:
                return key, _MISSING
            self._consumed.add(key)
            return key, self._data[key]
        spellings = (key, *others)
        self._allowed.update(others)
        present = [s for s in spellings if s in self._data]
        if len(present) > 1:
            raise self.error(present[1], f"`{present[0]}` and `{present[1]}` mean the same; keep one")
        if not present:
            return key, _MISSING
        self._consumed.add(present[0])
        return present[0], self._data[present[0]]

    def has(self, key: str) -> bool:
        """Whether the table holds the key (in any accepted spelling)."""
        return key in self._data or any(s in self._data for s in self._spellings.get(key, ()))

    def names(self) -> list[str]:
        """The table's keys as written (a table of user-named entries: `[ops.intermediates.<name>]`)."""
        return [str(key) for key in self._data]

    def raw(self, key: str, default: Any = None) -> Any:
        """The key's value as parsed, unchecked (`default` where absent)."""
        _, value = self._take(key)
        return default if value is _MISSING else value

    def spelled_raw(self, key: str, default: Any = None) -> tuple[str, Any]:
        """(the spelling the config used, or `key` when absent; the value or `default`): for keys whose alias
        says something of its own (`forbidden_instructions` are machine instructions)."""
        spelled, value = self._take(key)
        return spelled, default if value is _MISSING else value

    # --- typed getters -------------------------------------------------------------------------------
    def string(self, key: str, default: str | None = None, *, required: bool = False) -> str | None:
        """The key's string value (`default` where absent; an error where `required`)."""
        spelled, value = self._take(key)
        if value is _MISSING:
            if required:
                raise ConfigError(f"`{self.where}` needs `{key}`", path=self.source.path, line=self.line)
            return default
        if not isinstance(value, str):
            raise self.error(spelled, f"expected a string, got {_type_name(value)}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        """The key's boolean value (`default` where absent)."""
        spelled, value = self._take(key)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            raise self.error(spelled, f"expected true or false, got {_type_name(value)}")
        return value

    def integer(self, key: str, default: int | None, *, minimum: int | None = None) -> int | None:
        """The key's integer value, at least `minimum` (`default` where absent; a bool is no integer)."""
        spelled, value = self._take(key)
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(spelled, f"expected an integer, got {_type_name(value)}")
        if minimum is not None and value < minimum:
            raise self.error(spelled, f"must be at least {minimum}, got {value}")
        return value

    def number(self, key: str, default: float | None, *, positive: bool = False) -> float | None:
        """The key's numeric value, > 0 where `positive` (`default` where absent)."""
        spelled, value = self._take(key)
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(spelled, f"expected a number, got {_type_name(value)}")
        if positive and not value > 0:
            raise self.error(spelled, f"must be greater than 0, got {value}")
        return float(value)

    def string_list(self, key: str, default: Iterable[str] | None = None) -> tuple[str, ...] | None:
        """The key's strings (one string is a list of one; `default` where absent)."""
        spelled, value = self._take(key)
        if value is _MISSING:
            return tuple(default) if default is not None else None
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(spelled, "expected a list of strings")
        return tuple(value)

    def choice(self, key: str, enum: type[E], default: E, spellings: Mapping[str, E] | None = None) -> E:
        """One of `enum`'s values; `spellings`: other accepted names of members (upstream's)."""
        spelled, value = self._take(key)
        if value is _MISSING:
            return default
        if spellings and isinstance(value, str) and value in spellings:
            return spellings[value]
        if isinstance(value, str):
            with contextlib.suppress(ValueError):  # a member's value: one lookup
                return enum(value)
        members = [m.value for m in enum]
        if value not in members:
            raise self.error(
                spelled,
                f"unknown value {value!r}; expected one of {_or_list(members)}"
                + _suggest(str(value), members),
            )
        return enum(value)

    def table(self, key: str, aliases: Mapping[str, str] | None = None) -> TableReader | None:
        """The key's sub-table as a reader of its own (None where absent)."""
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
        """Refuse the keys nothing read (a misspelling gets a suggestion)."""
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


def _type_name(value: object) -> str:
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
