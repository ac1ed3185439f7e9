"""Escaping at every output boundary: one function per output syntax.

Everything a report shows that comes from the user's repository (op names, messages, kwargs,
paths, compiler output) is untrusted: on a fork PR its author controls it. Each function here
makes such a string inert in exactly one syntax, so a name like ``<img src=x onerror=...>|**x**``
shows as those characters and nothing else. Pick the function for the place the text goes:

- `markdown_text`: running Markdown text (also safe inside an HTML block such as ``<summary>``);
- `markdown_cell`: a cell of a GitHub table (no line breaks, ``|`` escaped);
- `markdown_code_span`: an inline code span, with ``table_cell=True`` inside a table;
- `markdown_code_block`: a fenced code block (replay commands, compiler logs);
- `xml_text`: characters XML 1.0 cannot hold at all (ElementTree does the rest);
- `workflow_command_data` / `workflow_command_property`: GitHub workflow commands;
- `terminal_text`: one line of a terminal or a log (what `gpuemu-ci verify` prints from a report);
- `safe_url`: a URL that may go into a link, or None.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from urllib.parse import quote, urlsplit

# A hidden marker identifies the tool's own PR comment; untrusted text must never contain one.
MARKER_OPENING = "<!-- gpuemu-ci:"
MARKER_DEFUSED = "<!-- gpuemu-ci (quoted):"

# C0/C1 controls (tab kept), the bidirectional overrides that make text read differently from what
# it is ("Trojan Source") and lone surrogates (a JSON document may hold them; UTF-8 cannot, so the
# comment could not be sent); they are replaced, not silently dropped, so a reader sees them.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NEWLINES = re.compile(r"\r\n|\r|\n")
# Inline syntax anywhere in a line: emphasis, code, links, tables, strikethrough, math (`$`). A
# backslash before ASCII punctuation is always a literal in CommonMark.
_MD_INLINE = re.compile(r"([\\`*_\[\]|~$])")
# Block syntax counts only where a block starts: the text's own start (a list item's content, for
# one). Headings, list bullets, setext underlines, ordered-list numbers.
_MD_BLOCK_START = re.compile(r"^(\s*)([#+=-]|\d+(?=[.)]))")
# @mention and #123 issue references (and e-mail autolinks, whose domain may start with a dot) are
# linked after rendering, so escaping cannot stop them: a zero-width joiner after the sigil does (and
# copies invisibly).
_MENTION = re.compile(r"([@#])(?=[\w.-])")
# GitHub also links "GH-123" to issue 123 (any case); a zero-width joiner after "GH" stops that too.
_GH_REFERENCE = re.compile(r"(?i)\b(gh)(?=-\d)")
_ZWJ = "\u200d"
# GitHub links bare URLs ("https://...", "www.") itself; an escaped ":" or "." stops it.
_AUTOLINK = re.compile(r"://|(?i:\bwww)\.")
_URL_FORBIDDEN = re.compile("[\x00-\x1f\x7f]")  # urlsplit drops tabs and newlines silently
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")
_BACKTICK_RUN = re.compile(r"`+")
_TILDE_RUN = re.compile(r"~+")


# Everything that could end a line, move the cursor, recolour or reorder a terminal, or not encode at all.
_TERMINAL_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def terminal_text(value: object) -> str:
    """``value`` as one inert line for a terminal or a log: control characters (newline, CR, ESC, ...), line
    and paragraph separators, bidirectional overrides and lone surrogates are written as Python escapes
    (``\\n``, ``\\x1b``, ``\\u202e``), so a string from a report can neither start a line that looks like
    the tool's own ("verdict: passed") nor rewrite what is on screen."""
    return _TERMINAL_UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(value))


def _visible_controls(text: str) -> str:
    return _CONTROL.sub("\ufffd", text)


def defuse_marker(text: str) -> str:
    """``text`` with any copy of the comment marker's opening made harmless."""
    return text.replace(MARKER_OPENING, MARKER_DEFUSED)


def markdown_text(value: object) -> str:
    """``value`` as inline Markdown text that renders literally: no markup, HTML, mention or link.

    Line breaks become spaces (inline text never starts a block). ``&``, ``<`` and ``>`` become
    entities, which also hold inside HTML blocks where backslash escapes do not.
    """
    # Leading spaces or a tab where the text starts a block (a list item's content) make an indented code
    # block, which shows the escapes below as backslashes; a paragraph drops them anyway.
    text = _visible_controls(_NEWLINES.sub(" ", str(value))).lstrip(" \t")
    text = html.escape(text, quote=False)
    text = _MD_INLINE.sub(r"\\\1", text)
    text = _MD_BLOCK_START.sub(_escape_block_start, text)
    text = _AUTOLINK.sub(lambda m: m.group().replace(":", "\\:").replace(".", "\\."), text)
    text = _GH_REFERENCE.sub(r"\1" + _ZWJ, text)
    return _MENTION.sub(r"\1" + _ZWJ, text)


def _escape_block_start(match: re.Match[str]) -> str:
    lead, token = match.group(1), match.group(2)
    if token.isdigit():  # "1." starts an ordered list: escape the delimiter after the number
        return lead + token + "\\"
    return lead + "\\" + token


def markdown_cell(value: object) -> str:
    """``value`` for a cell of a GitHub Markdown table: `markdown_text` (which escapes ``|``), with
    runs of whitespace collapsed so that the row stays one line."""
    return " ".join(markdown_text(value).split()) or " "


def markdown_code_span(value: object, *, table_cell: bool = False) -> str:
    """``value`` as an inline code span: the fence is one backtick longer than any run inside.

    Inside a table cell a ``|`` would still split the cell (tables are split before code spans are
    parsed), so ``table_cell=True`` escapes it the way GitHub reads it back as ``|``.
    """
    text = defuse_marker(_visible_controls(_NEWLINES.sub(" ", str(value))))
    if table_cell:
        text = text.replace("|", "\\|")
    longest = max((len(run) for run in _BACKTICK_RUN.findall(text)), default=0)
    fence = "`" * (longest + 1)
    # A span whose content starts or ends with a backtick (or is blank) needs padding spaces.
    pad = " " if (not text.strip() or text.startswith("`") or text.endswith("`")) else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def markdown_code_block(value: object, language: str = "") -> str:
    """``value`` as a fenced code block, fence longer than any backtick run inside; ends in a newline."""
    text = defuse_marker(_visible_controls(_NEWLINES.sub("\n", str(value)).replace("\t", "    ")))
    longest = max((len(run) for run in _BACKTICK_RUN.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    info = re.sub(r"[^A-Za-z0-9_+-]", "", language)
    return f"{fence}{info}\n{text.rstrip(chr(10))}\n{fence}\n"


def xml_text(value: object) -> str:
    """``value`` without the characters XML 1.0 cannot represent (ElementTree escapes the rest but
    writes those unchanged, which makes the file unreadable); each becomes U+FFFD."""
    return _XML_INVALID.sub("\ufffd", str(value))


def workflow_command_data(value: object) -> str:
    """The message part of a workflow command (after ``::``): ``%``, CR and LF percent-encoded, as the
    runner decodes them; otherwise a newline would end the command and start a forged one."""
    return str(value).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def workflow_command_property(value: object) -> str:
    """A property value of a workflow command (``file=``, ``title=``): the data escapes plus ``:`` and
    ``,``, which would otherwise end the value or start another property."""
    return workflow_command_data(value).replace(":", "%3A").replace(",", "%2C")


def safe_url(value: object) -> str | None:
    """``value`` if it is an absolute http(s) URL, with the characters that would end a Markdown link
    or an HTML attribute percent-encoded; None for anything else (``javascript:``, relative, empty)."""
    if not isinstance(value, str) or not value:
        return None
    text = value.strip()
    try:
        parts = urlsplit(text)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.netloc or _URL_FORBIDDEN.search(text):
        return None
    return quote(text, safe="/:?#[]@!$&'*+,;=%-._~")


def workflow_command(command: str, message: str = "", properties: Mapping[str, object] | None = None) -> str:
    """``::command key=value,...::message`` with both parts escaped; None properties are left out."""
    props = ",".join(
        f"{key}={workflow_command_property(str(value))}"
        for key, value in (properties or {}).items()
        if value is not None and value != ""
    )
    return f"::{command}{' ' + props if props else ''}::{workflow_command_data(message)}"
