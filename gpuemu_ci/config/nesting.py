"""Where a TOML text nests deepest: the line a config error points at when Python's TOML parser, which
recurses once per nested array or inline table, runs out of stack on a value nested thousands deep."""

from __future__ import annotations

from dataclasses import dataclass

_OPENERS = frozenset("[{")
_CLOSERS = frozenset("]}")


@dataclass(frozen=True)
class Nesting:
    """The deepest nesting of arrays and inline tables in a text, and the 1-based line where it is reached."""

    depth: int
    line: int


def deepest(text: str) -> Nesting:
    """Counts `[`/`{` against `]`/`}` outside strings and comments. Table headers (`[a]`, `[[a]]`) open and
    close on their own line, so they count as depth 1 or 2 and never hide a deeper value."""
    depth = best = 0
    best_line = line = 1
    quote: str | None = None  # the delimiter of the string being read: ", ', \"\"\" or '''
    i, size = 0, len(text)
    while i < size:
        char = text[i]
        if char == "\n":
            line += 1
        if quote is not None:
            if quote[0] == '"' and char == "\\":
                if i + 1 < size and text[i + 1] == "\n":
                    line += 1
                i += 2
                continue
            if text.startswith(quote, i):
                i += len(quote)
                quote = None
                continue
            if char == "\n" and len(quote) == 1:
                quote = None  # an unterminated one-line string: the parser reports it, stop reading it here
        elif char == "#":
            end = text.find("\n", i)
            i = size if end < 0 else end
            continue
        elif char in "\"'":
            quote = char * 3 if text.startswith(char * 3, i) else char
            i += len(quote)
            continue
        elif char in _OPENERS:
            depth += 1
            if depth > best:
                best, best_line = depth, line
        elif char in _CLOSERS:
            depth = max(depth - 1, 0)
        i += 1
    return Nesting(best, best_line)
