"""A CUDA C++ source read as tokens, for the CUDA mutation operators: the `__global__` and `__device__`
functions in it, their pointer parameters, and which tokens sit in a loop.

This is a tokenizer, not a C++ parser: comments, string and character literals and preprocessor lines are
skipped whole, and everything else is an identifier, a number or a punctuator (the longest one that matches,
so `<<` and `<<=` are never read as comparisons). That is enough to find function bodies (matching braces),
loop bodies and expression boundaries at a statement's own nesting depth. Positions are the file's: 1-based
lines and UTF-8 byte columns, as `source.Span` wants them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property

from gpuemu_ci.mutate.source import Span

_PUNCTUATORS = (  # longest first: `<<=` is one token, never `<` then `<=`
    *("<<<=", ">>>="),
    *("<<=", ">>=", "...", "->*"),
    *("->", "++", "--", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "+=", "-=", "*=", "/=", "%="),
    *("&=", "|=", "^=", "::", ".*"),
    *"{}[]();:,.?~!+-*/%<>=&|^#",
)
_TOKEN = re.compile(
    r"(?P<space>\s+)"
    r"|(?P<comment>//[^\n]*|/\*.*?(?:\*/|\Z))"
    r"|(?P<string>[uUL8]*\"(?:\\.|[^\"\\\n])*\"|[uUL8]*'(?:\\.|[^'\\\n])*')"
    r"|(?P<number>\.?\d(?:[eEpP][+-]|[\w.'])*)"
    r"|(?P<name>[A-Za-z_]\w*)"
    r"|(?P<punct>" + "|".join(re.escape(p) for p in _PUNCTUATORS) + r")"
    r"|(?P<other>.)",
    re.DOTALL,
)
_DIRECTIVE = re.compile(r"^[ \t]*#(?:[^\n\\]|\\.)*", re.MULTILINE | re.DOTALL)
_QUALIFIERS = ("__global__", "__device__")
_CASTS = frozenset(("static_cast", "reinterpret_cast", "const_cast", "dynamic_cast", "template"))
_TEMPLATE_INSIDE = frozenset(("::", ",", "*", "&", "const", "unsigned", "signed", "long", "short"))
_LOOPS = ("for", "while", "do")


@dataclass(frozen=True)
class Token:
    """One token of a CUDA source: its kind (`name`, `number`, `punct`, `string`, `other`, or `end` for the
    marker after the last), text, index in the token list and span in the file."""

    kind: str  # "name", "number", "punct", "string", "other"
    text: str
    index: int  # position in the token list
    span: Span

    def is_(self, *texts: str) -> bool:
        """Whether the token's text is one of `texts`."""
        return self.text in texts


def tokenize(text: str) -> list[Token]:
    """The tokens of `text` outside comments, literals' insides and preprocessor lines, and an `end` token."""
    directives = [(m.start(), m.end()) for m in _DIRECTIVE.finditer(text)]
    line_starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    tokens: list[Token] = []
    position, directive = 0, 0
    line = 0

    def where(offset: int) -> tuple[int, int]:
        nonlocal line
        while line + 1 < len(line_starts) and line_starts[line + 1] <= offset:
            line += 1
        return line + 1, len(text[line_starts[line] : offset].encode())

    while position < len(text):
        while directive < len(directives) and directives[directive][1] <= position:
            directive += 1
        if directive < len(directives) and directives[directive][0] <= position:
            position = directives[directive][1]
            continue
        match = _TOKEN.match(text, position)
        assert match is not None and match.lastgroup is not None  # `other` matches any character
        kind, end = match.lastgroup, match.end()
        if kind not in ("space", "comment"):
            start_line, start_col = where(position)
            end_line, end_col = where(end)
            tokens.append(
                Token(kind, match.group(), len(tokens), Span(start_line, start_col, end_line, end_col))
            )
        position = end
    # An end marker: the token after any token of the file exists, so a look at the next one never fails.
    end_line, end_col = where(len(text))
    tokens.append(Token("end", "", len(tokens), Span(end_line, end_col, end_line, end_col)))
    return tokens


def matching(tokens: list[Token], start: int) -> int:
    """The index of the bracket that closes the one at `start` (`(`, `[` or `{`); the end token's if none."""
    opening = tokens[start].text
    closing = {"(": ")", "[": "]", "{": "}"}[opening]
    depth = 0
    for token in tokens[start:]:
        if token.text == opening:
            depth += 1
        elif token.text == closing:
            depth -= 1
            if depth == 0:
                return token.index
    return len(tokens) - 1


@dataclass(frozen=True)
class Parameter:
    """A parameter of a kernel, as far as the operators need it: its name, whether it points at memory,
    whether its type is floating."""

    name: str
    pointer: bool  # declared with `*` (or as an array): the function indexes global memory through it
    floating: bool  # its type is float (a scalar or what the pointer points at)


@dataclass
class Function:
    """A `__global__` or `__device__` function with a body: `body` is the index range of the tokens between
    its braces."""

    name: str
    qualifier: str  # "__global__" or "__device__"
    parameters: tuple[Parameter, ...]
    tokens: list[Token]
    body: range
    _in_loop: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        for index in self.body:
            token = self.tokens[index]
            if token.kind == "name" and token.text in _LOOPS:
                self._in_loop.update(_loop_body(self.tokens, index, self.body.stop))

    @property
    def pointers(self) -> frozenset[str]:
        """The names of the parameters declared as pointers or arrays (the global memory the function
        indexes)."""
        return frozenset(p.name for p in self.parameters if p.pointer)

    def walk(self) -> Iterator[Token]:
        """The tokens of the body, in order."""
        for index in self.body:
            yield self.tokens[index]

    def in_loop(self, token: Token) -> bool:
        """Whether the token is in the body of a loop (not in a `for` header)."""
        return token.index in self._in_loop

    @cached_property
    def templates(self) -> frozenset[int]:
        """Indices of `<` and `>` tokens that bracket template arguments, not comparisons."""
        found: set[int] = set()
        for token in self.walk():
            if token.text == "<" and token.index > 0:
                close = _template_close(self.tokens, token.index, self.body.stop)
                if close is not None:
                    found.update((token.index, close))
        return frozenset(found)

    def local_floats(self) -> frozenset[str]:
        """Names declared in the body as scalar `float` variables (`float acc = 0.0f;`, `float a, b;`)."""
        names: set[str] = set()
        for token in self.walk():
            if token.text != "float":
                continue
            index = token.index + 1
            while index < self.body.stop:
                name, after = self.tokens[index], self.tokens[min(index + 1, self.body.stop - 1)]
                if name.kind != "name" or after.text not in ("=", ";", ","):
                    break
                names.add(name.text)
                comma = _statement_comma(self.tokens, index + 1, self.body.stop)
                if comma is None:
                    break
                index = comma + 1
        return frozenset(names)


def _statement_comma(tokens: list[Token], start: int, stop: int) -> int | None:
    """The next `,` at the statement's own depth before its `;` (a declaration's next name), or None."""
    for token in depth_zero(tokens, start, stop):
        if token.text in (",", ";"):
            return token.index if token.text == "," else None
    return None


def depth_zero(tokens: list[Token], start: int, stop: int) -> Iterator[Token]:
    """The tokens from `start` at its own bracket depth (an opening bracket, but nothing inside it), ending with
    the closing bracket of an enclosing group when one comes before `stop`."""
    depth = 0
    for token in tokens[start:stop]:
        if token.text in (")", "]", "}"):
            if depth == 0:
                yield token
                return
            depth -= 1
        elif depth == 0:
            yield token
            if token.text in ("(", "[", "{"):
                depth += 1
        elif token.text in ("(", "[", "{"):
            depth += 1


def _template_close(tokens: list[Token], start: int, stop: int) -> int | None:
    """The `>` that closes template arguments opened by the `<` at `start`, when it reads as one: after a cast
    keyword, or a short list of type words followed by `(`, `::`, `{` or a name."""
    before = tokens[start - 1]
    if before.kind != "name":
        return None
    depth = 0
    for index in range(start + 1, min(stop, start + 16)):
        token = tokens[index]
        if token.text == "<":
            depth += 1
        elif token.text == ">":
            if depth:
                depth -= 1
                continue
            following = tokens[index + 1] if index + 1 < len(tokens) else None
            if before.text in _CASTS:
                return index
            if following is not None and (following.is_("(", "::", "{") or following.kind == "name"):
                return index
            return None
        elif not (token.kind in ("name", "number") or token.text in _TEMPLATE_INSIDE):
            return None
    return None


def _loop_body(tokens: list[Token], keyword: int, stop: int) -> range:
    """The token indices of the body of the loop whose keyword is at `keyword` (a braced block, or one
    statement up to its `;`); a `do` body ends where its `while` begins."""
    index = keyword + 1
    if tokens[keyword].text != "do":
        if index >= stop or tokens[index].text != "(":
            return range(0)
        index = matching(tokens, index) + 1
    if index >= stop:
        return range(0)
    if tokens[index].text == "{":
        return range(index + 1, matching(tokens, index))
    end = next((t.index for t in depth_zero(tokens, index, stop) if t.text == ";"), stop - 1)
    return range(index, end + 1)


def _parameters(tokens: list[Token], open_paren: int, close_paren: int) -> tuple[Parameter, ...]:
    params: list[Parameter] = []
    current: list[Token] = []
    depth = 0
    for token in tokens[open_paren + 1 : close_paren]:
        if token.text in ("(", "[", "<"):
            depth += 1
        elif token.text in (")", "]", ">"):
            depth -= 1
        if token.text == "," and depth == 0:
            params.append(_parameter(current))
            current = []
        else:
            current.append(token)
    if current:
        params.append(_parameter(current))
    return tuple(p for p in params if p.name)


def _parameter(tokens: list[Token]) -> Parameter:
    names = [t for t in tokens if t.kind == "name" and not t.text.startswith("__")]
    name = names[-1].text if names else ""
    texts = [t.text for t in tokens]
    return Parameter(name, "*" in texts or "[" in texts, "float" in texts)


def device_functions(tokens: list[Token]) -> list[Function]:
    """Every `__global__` or `__device__` function defined (with a body) in the tokens, in source order."""
    found: list[Function] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token.kind != "name" or token.text not in _QUALIFIERS:
            index += 1
            continue
        declaration = _declaration(tokens, index)
        if declaration is None:
            index += 1
            continue
        name, open_paren, close_paren, brace = declaration
        end = matching(tokens, brace)
        found.append(
            Function(
                name,
                token.text,
                _parameters(tokens, open_paren, close_paren),
                tokens,
                range(brace + 1, min(end, len(tokens) - 1)),
            )
        )
        index = end + 1
    return found


def _declaration(tokens: list[Token], qualifier: int) -> tuple[str, int, int, int] | None:
    """(name, its `(`, its `)`, the body's `{`) of the function declared from the qualifier at `qualifier`;
    None for a variable or a declaration without a body."""
    for index in range(qualifier + 1, min(len(tokens), qualifier + 40)):
        text = tokens[index].text
        if text in (";", "=", "{"):
            return None
        if text == "(" and tokens[index - 1].kind == "name":
            close = matching(tokens, index)
            for after in range(close + 1, min(len(tokens), close + 20)):
                if tokens[after].text == "{":
                    return tokens[index - 1].text, index, close, after
                if tokens[after].text in (";", "="):
                    return None
            return None
    return None
