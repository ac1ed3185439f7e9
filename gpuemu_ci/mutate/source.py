"""A kernel's source file as text, and one change to it: a span of the file replaced by new text.

Positions are the AST's: 1-based lines, columns in UTF-8 bytes. A change keeps every other byte of the file,
so the changed kernel keeps its comments, its formatting and (for a change within one line) its line numbers,
and the change reads as a one-line diff.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """[start, end) in (line, byte column) positions."""

    line: int
    col: int
    end_line: int
    end_col: int

    @classmethod
    def of(cls, node: ast.AST) -> Span:
        """The span of an AST node; raises ValueError for a node without an end position."""
        end_line, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
        if end_line is None or end_col is None:
            raise ValueError("the node has no end position")
        return cls(node.lineno, node.col_offset, end_line, end_col)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Change:
    """The span replaced by `new`."""

    span: Span
    new: str


class SourceFile:
    """A file's text, addressed by AST positions."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self._encoded = [line.encode() for line in self.lines]

    def segment(self, node: ast.AST) -> str:
        """The exact text of `node`."""
        return self.span_text(Span.of(node))

    def span_text(self, span: Span) -> str:
        """The exact text of `span` (columns are byte offsets, as Python's AST gives them)."""
        if span.line == span.end_line:
            return self._encoded[span.line - 1][span.col : span.end_col].decode()
        parts = [self._encoded[span.line - 1][span.col :]]
        parts += self._encoded[span.line : span.end_line - 1]
        parts.append(self._encoded[span.end_line - 1][: span.end_col])
        return b"".join(parts).decode()

    def changed(self, change: Change) -> str:
        """The whole file's text with the change made."""
        span = change.span
        head = b"".join(self._encoded[: span.line - 1]) + self._encoded[span.line - 1][: span.col]
        tail = self._encoded[span.end_line - 1][span.end_col :] + b"".join(self._encoded[span.end_line :])
        return (head + change.new.encode() + tail).decode()

    def diff_lines(self, change: Change) -> tuple[str, str]:
        """(the original lines the change touches, the same lines changed), each stripped and joined on one
        line: the one-line diff a survivor is shown with."""
        span = change.span
        before = "".join(self.lines[span.line - 1 : span.end_line])
        changed = SourceFile(self.changed(change))
        after = "".join(changed.lines[span.line - 1 : span.line + change.new.count("\n")])
        return _one_line(before), _one_line(after)


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in text.strip().splitlines() if part.strip())


def text_digest(text: str) -> str:
    """A short, stable digest of a text (kernel sources in cache keys and mutant ids)."""
    return hashlib.blake2b(text.encode(), digest_size=10).hexdigest()
