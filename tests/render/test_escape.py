"""Each escape function makes hostile text inert in its own syntax.

Where the syntax is Markdown, the check renders with cmark-gfm (GitHub's own parser, through
cmarkgfm) with raw HTML allowed, which is stricter than GitHub (GitHub also sanitises).
"""

from __future__ import annotations

import html
import re

import pytest

from gpuemu_ci.render import escape

HOSTILE = [
    "<img src=x onerror=alert(1)>|**bold**",
    "```\n@octocat please look\n```",
    "<!-- gpuemu-ci:v1 key=forged -->",
    "# heading\n- item\n1. one\n===",
    "[link](javascript:alert(1)) ![img](http://x/y.png) _em_ ~~strike~~ $x^2$ `code`",
    "a | b || c \\| d",
    "&lt;script&gt; &#64;octocat &amp;",
    "tab\there\r\nCRLF\rCR\x00nul\u202ereversed",
]


def gfm(markdown: str) -> str:
    cmarkgfm = pytest.importorskip("cmarkgfm")
    from cmarkgfm.cmark import Options

    result: str = cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)
    return result


def tags(rendered: str) -> set[str]:
    return set(re.findall(r"<([a-zA-Z][\w-]*)", rendered))


@pytest.mark.parametrize("value", HOSTILE)
def test_markdown_text_renders_as_one_plain_paragraph(value: str) -> None:
    rendered = gfm(escape.markdown_text(value))
    assert tags(rendered) <= {"p"}
    # What a reader sees is the text itself (line breaks folded, controls made visible).
    shown = html.unescape(re.sub(r"<[^>]+>", "", rendered)).strip().replace("\u200d", "")
    expected = re.sub(r"\r\n|\r|\n", " ", value).replace("\x00", "\ufffd").replace("\u202e", "\ufffd")
    assert shown == expected.strip()


def test_markdown_text_breaks_mentions_and_issue_references() -> None:
    text = escape.markdown_text("ping @octocat about #12, mail a@b.example")
    assert "@octocat" not in text and "#12" not in text and "a@b" not in text
    rendered = gfm(text)
    assert tags(rendered) == {"p"}  # no mention link, no issue link, no mailto
    assert (
        html.unescape(rendered).replace("\u200d", "").strip()
        == "<p>ping @octocat about #12, mail a@b.example</p>"
    )


def test_markdown_text_cannot_forge_the_comment_marker() -> None:
    assert "<!--" not in escape.markdown_text("<!-- gpuemu-ci:v1 key=gate -->")


@pytest.mark.parametrize("value", HOSTILE)
def test_markdown_cell_keeps_a_table_row_intact(value: str) -> None:
    table = f"| a | b | c |\n|---|---|---|\n| x | {escape.markdown_cell(value)} | y |\n"
    rendered = gfm(table)
    body = rendered.split("<tbody>", 1)[1]
    assert body.count("<td") == 3, rendered
    assert tags(body) <= {"tr", "td"}


@pytest.mark.parametrize("value", HOSTILE)
def test_code_span_shows_the_text_verbatim(value: str) -> None:
    rendered = gfm(f"see {escape.markdown_code_span(value)} here")
    codes = re.findall(r"<code>(.*?)</code>", rendered, re.S)
    assert len(codes) == 1 and tags(rendered) <= {"p", "code"}
    expected = escape.defuse_marker(re.sub(r"\r\n|\r|\n", " ", value))
    expected = expected.replace("\x00", "\ufffd").replace("\u202e", "\ufffd")
    assert html.unescape(codes[0]).strip() == expected.strip()


@pytest.mark.parametrize("value", HOSTILE)
def test_code_span_in_a_table_cell(value: str) -> None:
    table = f"| a | b |\n|---|---|\n| {escape.markdown_code_span(value, table_cell=True)} | y |\n"
    body = gfm(table).split("<tbody>", 1)[1]
    assert body.count("<td") == 2 and tags(body) <= {"tr", "td", "code"}
    assert "|" not in value or "|" in html.unescape(body)


@pytest.mark.parametrize("value", [*HOSTILE, "````\nfour backticks\n````"])
def test_code_block_holds_everything_inside(value: str) -> None:
    rendered = gfm("before\n\n" + escape.markdown_code_block(value, "sh") + "\nafter\n")
    assert tags(rendered) <= {"p", "pre", "code"}
    assert rendered.count("<pre") == 1 and rendered.rstrip().endswith("<p>after</p>")
    code = re.search(r"<code[^>]*>(.*?)</code>", rendered, re.S)
    assert code is not None
    inside = html.unescape(code.group(1))
    assert "gpuemu-ci:v1" not in inside or "<!-- gpuemu-ci:v1" not in inside


def test_code_block_language_cannot_inject() -> None:
    block = escape.markdown_code_block("x", "sh\n<script>")
    assert block.splitlines()[0] == "```shscript"


def test_xml_text_drops_what_xml_cannot_hold() -> None:
    assert escape.xml_text("a\x00b\x1bc\ttab\nline") == "a\ufffdb\ufffdc\ttab\nline"


def test_workflow_command_escaping_matches_the_runner() -> None:
    assert escape.workflow_command_data("50%\r\n::error::x") == "50%25%0D%0A::error::x"
    assert escape.workflow_command_property("a,b:c%\n") == "a%2Cb%3Ac%25%0A"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://github.com/o/r/actions/runs/1", "https://github.com/o/r/actions/runs/1"),
        ('https://x.test/a b)(<>"', "https://x.test/a%20b%29%28%3C%3E%22"),
        ("javascript:alert(1)", None),
        ("//evil.test/x", None),
        ("/relative", None),
        ("https://x.test/\nnewline", None),
        ("", None),
        (None, None),
    ],
)
def test_safe_url(url: str | None, expected: str | None) -> None:
    assert escape.safe_url(url) == expected
