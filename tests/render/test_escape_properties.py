"""Properties of the escape functions (render/escape.py) over any text, not only the hostile strings we thought of.

On a fork's pull request the op names, messages and kwargs in a report are written by whoever opened it. What a
maintainer relies on: whatever that text is, it shows as itself and nothing else (no markup, no link, no
mention, no forged comment marker), a table row stays one row, a workflow command stays one command and a
terminal line stays one line. Markdown is checked the way GitHub reads it: rendered with cmark-gfm, raw HTML
allowed (stricter than GitHub, which also sanitises).
"""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET

from hypothesis import example, given
from hypothesis import strategies as st

from gpuemu_ci.render import escape
from tests.render.test_escape import gfm, tags

# Text with the characters that mean something somewhere: Markdown and HTML syntax, entities, URLs, mentions,
# line breaks, controls and bidirectional overrides, mixed with ordinary letters and any Unicode.
ACTIVE = [
    *"<>&\"'`*_[]()|~$\\#=+-!:.@/%,;{} \t\r\n\x00\x1b\x7f\u0085\u202e\u2028",
    "    ",
    "1.",
    "- ",
    "www.",
    "http://",
]
hostile = st.lists(st.sampled_from(ACTIVE) | st.sampled_from("abcxyz09") | st.characters(), max_size=30).map(
    "".join
)


def folded(value: str) -> str:
    """What an inline escape shows: line breaks as spaces, invisible controls as U+FFFD."""
    return escape._CONTROL.sub("\ufffd", re.sub(r"\r\n|\r|\n", " ", value))


def unjoined(text: str) -> str:
    """Text without zero-width joiners: the escape adds them after @ and # (they break mentions invisibly), so
    the comparison leaves them out on both sides."""
    return text.replace("\u200d", "")


def as_text(value: str) -> str:
    """What `markdown_text` shows of `value`: folded, its own joiners aside, without the leading spaces and tabs
    it drops (they would start an indented code block)."""
    return unjoined(folded(value)).lstrip(" \t")


def shown_text(rendered: str) -> str:
    """The characters a reader sees in rendered HTML."""
    return unjoined(html.unescape(re.sub(r"<[^>]+>", "", rendered)))


def cmark_whitespace(text: str) -> str:
    """Paragraph text as CommonMark shows it: leading and trailing spaces, tabs and line ends dropped."""
    return text.strip(" \t\n")


@given(hostile)
@example("_@.a")  # an e-mail autolink whose domain starts with a dot, once
def test_markdown_text_shows_the_text_and_nothing_else(value: str) -> None:
    rendered = gfm(f"text: {escape.markdown_text(value)}")
    assert tags(rendered) <= {"p"}, rendered
    assert cmark_whitespace(shown_text(rendered)) == cmark_whitespace(f"text: {as_text(value)}")
    assert escape.MARKER_OPENING not in escape.markdown_text(value)


# What may start a block: indentation (four spaces start an indented code block) and block markers.
BLOCK_START = st.sampled_from(
    ["", " ", "  ", "    ", "\t", "     1. ", "> ", "# ", "- ", "```", "<div>", "|"]
)


@given(st.tuples(BLOCK_START, hostile).map("".join))
@example("\u200d")  # a joiner of the user's own (the escape adds its own after @ and #)
@example("    1. x")  # an indented code block, once
def test_markdown_text_starting_a_list_item_stays_plain(value: str) -> None:
    """Block syntax counts where a block starts: escaped text at the start of a list item is still plain."""
    rendered = gfm(f"- {escape.markdown_text(value)}\n")
    assert tags(rendered) <= {"ul", "li", "p"}, rendered
    assert cmark_whitespace(shown_text(rendered)) == cmark_whitespace(as_text(value))


@given(hostile, hostile)
def test_markdown_cells_keep_the_row_one_row(first: str, second: str) -> None:
    row = f"| {escape.markdown_cell(first)} | {escape.markdown_cell(second)} |"
    rendered = gfm(f"| a | b |\n|---|---|\n{row}\n")
    body = rendered.split("<tbody>", 1)[1]
    assert body.count("<tr") == 1 and body.count("<td") == 2, rendered
    assert tags(body) <= {"tr", "td"}, rendered


@given(hostile)
def test_code_span_shows_the_text_verbatim(value: str) -> None:
    rendered = gfm(f"see {escape.markdown_code_span(value)} here")
    codes = re.findall(r"<code>(.*?)</code>", rendered, re.S)
    assert len(codes) == 1 and tags(rendered) <= {"p", "code"}, rendered
    expected = escape.defuse_marker(folded(value))
    # The span pads blank content (or content at a backtick) with a space each side; CommonMark strips one
    # space each side from content that has both and is not blank.
    shown = {expected, f" {expected} "}
    if len(expected) >= 2 and expected[0] == expected[-1] == " " and expected.strip(" "):
        shown.add(expected[1:-1])
    assert html.unescape(codes[0]) in shown


@given(hostile)
def test_code_block_holds_the_text_in_one_block(value: str) -> None:
    rendered = gfm(f"before\n\n{escape.markdown_code_block(value, 'text')}\nafter\n")
    assert tags(rendered) <= {"p", "pre", "code"}, rendered
    assert rendered.count("<pre") == 1 and rendered.rstrip().endswith("<p>after</p>"), rendered


@given(hostile, hostile)
def test_a_workflow_command_stays_one_command(message: str, title: str) -> None:
    """The runner splits workflow commands at line breaks and decodes %25, %0D, %0A (and %3A, %2C in
    properties): the escaped command is one line, and decodes to exactly what was escaped."""
    line = escape.workflow_command("error", message, {"title": title, "file": "gpuemu.toml"})
    assert "\n" not in line and "\r" not in line
    head, _, data = line[2:].partition("::")
    decode = {"%25": "%", "%0D": "\r", "%0A": "\n", "%3A": ":", "%2C": ","}
    properties = dict(item.split("=", 1) for item in head.split(" ", 1)[1].split(","))
    unescape = re.compile("|".join(decode))
    assert unescape.sub(lambda m: decode[m.group()], properties.get("title", "")) == title  # "": left out
    assert unescape.sub(lambda m: decode[m.group()], data) == message


@given(hostile)
def test_terminal_text_is_one_inert_line(value: str) -> None:
    line = escape.terminal_text(value)
    assert not escape._TERMINAL_UNSAFE.search(line)
    assert "\n" not in line and "\x1b" not in line
    line.encode("utf-8")  # no lone surrogate left to fail the write


@given(hostile | st.text())
def test_xml_text_always_makes_a_readable_file(value: str) -> None:
    element = ET.Element("failure", message=escape.xml_text(value))
    element.text = escape.xml_text(value)
    parsed = ET.fromstring(ET.tostring(element, encoding="unicode"))
    assert parsed.get("message") == escape.xml_text(value)
    # XML readers normalise line ends in text content.
    assert (parsed.text or "") == re.sub(r"\r\n?", "\n", escape.xml_text(value))


@given(
    hostile
    | st.sampled_from(["https://github.com/o/r/actions/runs/1", "http://x.example/a b", "javascript:x"])
)
def test_safe_url_is_an_http_url_that_cannot_end_a_link(value: str) -> None:
    url = escape.safe_url(value)
    if url is None:
        return
    assert url.startswith(("http://", "https://"))
    assert not re.search(r"[\s<>\"()\\`\x00-\x1f\x7f]", url), url
    rendered = gfm(f"[run]({url})")
    assert rendered.count("<a ") == 1 and tags(rendered) <= {"p", "a"}, rendered
