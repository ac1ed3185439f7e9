"""The PR comment, the step summary and the HTML report, rendered from real `gpuemu-ci run` output.

Runs (each once per session, shared with the other render tests through the session's base temp
directory): the quickstart (passes), the buggy example (fails), and tests/fixtures/render-project
(a skipped, an errored, a raising and a hostile-named op). Markdown is checked as GitHub renders
it, with cmark-gfm (cmarkgfm), raw HTML allowed.
"""

from __future__ import annotations

import copy
import html
import json
import re
from pathlib import Path
from typing import Any

import markupsafe
import msgspec
import pytest

from gpuemu_ci.render.html import render_html
from gpuemu_ci.render.links import Links
from gpuemu_ci.render.markdown import (
    COMMENT_LIMIT,
    SUMMARY_LIMIT,
    comment_marker,
    render_comment,
    render_summary,
)
from gpuemu_ci.results.model import Headline, Results
from tests.support_real_runs import real_run
from tests.support_tiers import runs_a_gate

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = "<img src=x onerror=alert(1)>|**bold**"
RUN_URL = "https://github.com/octo/kernels/actions/runs/77"
ARTIFACT_URL = "https://github.com/octo/kernels/actions/runs/77/artifacts/9"
# Tags a comment may contain: what the templates write. Anything else came from user text.
TEMPLATE_TAGS = {
    "a",
    "code",
    "details",
    "h2",
    "h3",
    "h4",
    "li",
    "p",
    "pre",
    "strong",
    "sub",
    "summary",
    "table",
    "tbody",
    "td",
    "th",
    "thead",
    "tr",
    "ul",
    "blockquote",
    "br",
}


def report_of(document: dict[str, Any]) -> Results:
    """A results document as the renderers take it: validated by the one results model. Built from the dict
    (not JSON text), so strings JSON cannot carry (a lone surrogate from an op's message) reach the renderer."""
    return msgspec.convert(document, type=Results, strict=False)  # strict=False: JSON object keys are text


@pytest.fixture(scope="module")
@runs_a_gate
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    base = tmp_path_factory.getbasetemp()
    return {name: real_run(base, name) for name in ("passing", "failing", "mixed")}


def gfm(markdown: str) -> str:
    cmarkgfm = pytest.importorskip("cmarkgfm")
    from cmarkgfm.cmark import Options

    result: str = cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)
    return result


def assert_renders_inert(markdown: str) -> None:
    """No tag but the templates' own, no live mention, every table row as wide as its header."""
    assert "@octocat" not in markdown  # a zero-width joiner sits after every @ from user text
    rendered = gfm(markdown)
    assert set(re.findall(r"<([a-zA-Z][\w-]*)", rendered)) <= TEMPLATE_TAGS
    for table in re.findall(r"<table>(.*?)</table>", rendered, re.S):
        rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)
        widths = {len(re.findall(r"<t[hd][ >]", row)) for row in rows}
        assert len(widths) == 1, table


def test_passing_run(runs: dict[str, dict[str, Any]]) -> None:
    report = report_of(runs["passing"])
    comment = render_comment(report, Links(RUN_URL, ARTIFACT_URL), job="gate")
    lines = comment.splitlines()
    assert lines[0] == "<!-- gpuemu-ci:v1 key=gate -->"
    assert lines[1].startswith("## ✅ gpuemu-ci passed: 2 of 2 ops within bounds")
    assert "Failures" not in comment and "not tested" not in comment
    rendered = gfm(comment)
    passes = re.search(r"<details><summary>(\d+) passing op × dtype", rendered)
    assert passes is not None and int(passes.group(1)) == 4  # softmax and gelu x float32, bfloat16
    for op in ("softmax", "gelu"):
        assert f"<td><code>{op}</code></td>" in rendered
    assert f'<a href="{ARTIFACT_URL}">report artifact</a>' in rendered
    assert_renders_inert(comment)


def test_failing_run_puts_failures_first_with_replay_commands(runs: dict[str, dict[str, Any]]) -> None:
    document = runs["failing"]
    report = report_of(document)
    comment = render_comment(report, Links(RUN_URL, ARTIFACT_URL))
    assert comment.splitlines()[1].startswith("## ❌ gpuemu-ci FAILED: 1 of 2 ops failed")
    assert comment.index("### Failures") < comment.index("passing op × dtype")
    softmax = next(op for op in document["ops"] if op["name"] == "softmax")
    worst = max(
        (f for f in softmax["failures"] if f["dtype"] == softmax["failures"][0]["dtype"]),
        key=lambda f: f["headroom"] or 0,
    )
    block = f"```sh\n{worst['replay']}\n```"
    assert block in comment  # copy-paste replay of the worst case
    rendered = gfm(comment)
    assert f"<code>{worst['case_seed']}</code>" in rendered
    assert f'<code>{worst["snapshot"]}</code> in the <a href="{ARTIFACT_URL}">report artifact</a>' in rendered
    for failure in softmax["failures"]:  # every recorded failure is replayable from the comment
        assert failure["replay"] in comment
    assert_renders_inert(comment)
    # Without an artifact URL there is no link, and the snapshot is still named.
    bare = render_comment(report)
    assert "](" not in bare and worst["snapshot"] in bare


def test_skipped_errored_and_hostile_ops(runs: dict[str, dict[str, Any]]) -> None:
    report = report_of(runs["mixed"])
    for markdown in (render_comment(report, job="gate"), render_summary(report)):
        assert_renders_inert(markdown)
        rendered = html.unescape(gfm(markdown)).replace("\u200d", "")
        assert "gpu_only</code> was <strong>not tested</strong>: skipped (no GPU)" in rendered
        assert re.search(r"<li><code>refbad</code>: 3 of 3 cases could not be judged", rendered)
        assert "<h3>Errored: not judged</h3>" in rendered
        assert f"<code>{HOSTILE}</code>" in rendered  # shown, and only as code
        assert "boom <b>not bold</b> @octocat ```" in rendered  # the message, as text
    comment = render_comment(report, job="gate")
    assert comment.count("<!-- gpuemu-ci:v1") == 1  # the op's message tried to forge a second marker


def test_summary_has_the_comment_content_and_the_counts(runs: dict[str, dict[str, Any]]) -> None:
    report = report_of(runs["failing"])
    comment, summary = render_comment(report, marker=False), render_summary(report)
    assert summary.startswith(comment.split("\n", 1)[0])
    for replay in re.findall(r"^gpuemu-ci replay .*$", comment, re.M):
        assert replay in summary
    counts = gfm(summary).split("<summary>Counts</summary>", 1)[1]
    cases = re.search(r"<td>cases</td>\s*<td[^>]*>([\d,]+)</td>", counts)
    assert cases is not None and cases.group(1) == f"{report.summary.cases_total:,}"


def big_failing_document(failing: dict[str, Any], copies: int) -> dict[str, Any]:
    document = copy.deepcopy(failing)
    softmax = next(op for op in document["ops"] if op["name"] == "softmax")
    ops = []
    for i in range(copies):
        op = copy.deepcopy(softmax)
        op["name"] = f"{HOSTILE}_{i:03d}"
        for failure in op["failures"]:
            failure["case_id"] = failure["case_id"].replace("softmax", op["name"])
        ops.append(op)
    document["ops"] = ops + [op for op in document["ops"] if op["name"] != "softmax"]
    return document


@pytest.mark.slow
def test_big_failing_suite_fits_and_says_what_was_cut(runs: dict[str, dict[str, Any]]) -> None:
    report = report_of(big_failing_document(runs["failing"], 150))
    failures = sum(len(op.failures) for op in report.ops)
    assert failures >= 300
    comment = render_comment(report, Links(RUN_URL, ARTIFACT_URL), job="gate")
    assert len(comment.encode("utf-8")) <= COMMENT_LIMIT
    assert comment.startswith("<!-- gpuemu-ci:v1 key=gate -->\n## ❌")
    note = re.search(r"> Shortened to fit GitHub's size limit\. Left out: (.*)\.\n", comment)
    assert note is not None
    assert "passing op × dtype results" in note.group(1) and "further failing case(s)" in note.group(1)
    assert re.search(r"the details of \d+ failing op × dtype result\(s\)", note.group(1))
    # The worst failure of the first failing op x dtype keeps its replay command.
    first = report.failure_groups()[0]
    assert first.worst is not None and f"```sh\n{first.worst.replay}\n```" in comment
    assert f"[the report artifact]({ARTIFACT_URL})" in comment
    assert_renders_inert(comment)
    summary = render_summary(report)
    assert len(summary.encode("utf-8")) <= SUMMARY_LIMIT


def test_the_poster_can_add_the_marker_within_the_budget(runs: dict[str, dict[str, Any]]) -> None:
    from gpuemu_ci.github import comments

    report = report_of(big_failing_document(runs["failing"], 150))
    body = render_comment(report, marker=False, job="matrix/leg 1")
    posted = comments.compose_body(body, "matrix/leg 1")
    assert len(posted.encode("utf-8")) <= comments.MAX_COMMENT_BYTES
    assert posted.splitlines()[0] == comments.comment_marker("matrix/leg 1") == comment_marker("matrix/leg 1")


def test_a_tiny_budget_keeps_only_the_verdict(runs: dict[str, dict[str, Any]]) -> None:
    report = report_of(big_failing_document(runs["failing"], 20))
    comment = render_comment(report, Links(RUN_URL, ARTIFACT_URL), limit=900)
    assert len(comment.encode("utf-8")) <= 900
    assert "## ❌ gpuemu-ci FAILED" in comment
    assert "Left out:" in comment or "too large for this space" in comment
    minimal = render_comment(report, Links(RUN_URL, ARTIFACT_URL), limit=750)
    assert len(minimal.encode("utf-8")) <= 750 and "too large for this space" in minimal


def test_one_huge_value_cannot_blow_the_budget(runs: dict[str, dict[str, Any]]) -> None:
    document = copy.deepcopy(runs["failing"])
    document["config"]["project"] = "p" * 200_000
    document["ops"][0]["name"] = "n" * 100_000
    document["ops"][0]["message"] = "m\n" * 50_000
    document["notes"] = ["x" * 100_000]
    comment = render_comment(report_of(document))
    assert len(comment.encode("utf-8")) <= COMMENT_LIMIT
    assert comment.splitlines()[1].startswith("## ❌ gpuemu-ci FAILED")


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        ({"cut_short": True}, "refused"),
        ({"verdict": "incomplete", "exit_code": 3, "cut_short": True}, "INCOMPLETE"),
        ({"verdict": "incomplete", "exit_code": 1}, "INCOMPLETE"),
        ({"ops": [], "kernels": []}, "ERROR: nothing was tested"),
        ({"exit_code": 3}, "refused"),
    ],
)
def test_never_passed_when_nothing_ran_or_the_run_was_cut_short(
    runs: dict[str, dict[str, Any]], edit: dict[str, Any], expected: str
) -> None:
    document = {**runs["passing"], **edit}
    if expected == "refused":  # a "passed" that was cut short or exited non-zero is not a results document
        with pytest.raises(msgspec.ValidationError, match="a passed verdict needs exit_code 0"):
            report_of(document)
        return
    report = report_of(document)
    assert report.headline is not Headline.PASSED
    comment = render_comment(report)
    assert comment.splitlines()[1].split(" gpuemu-ci ", 1)[1].startswith(expected)
    assert "passed:" not in comment.splitlines()[1]


def test_all_ops_skipped_is_not_a_pass(runs: dict[str, dict[str, Any]]) -> None:
    document = copy.deepcopy(runs["mixed"])
    document["ops"] = [op for op in document["ops"] if op["name"] == "gpu_only"]
    document.update(verdict="passed", exit_code=0)  # even if a producer said so
    comment = render_comment(report_of(document))
    assert "ERROR: nothing was tested" in comment.splitlines()[1]
    assert "**not tested**" in comment


DIFF = {
    "status": "compared",
    "message": "compared with the baseline of main",
    "baseline": None,
    "entries": [
        {
            "kind": "op",
            "name": "softmax",
            "variant": "float32",
            "classification": "regressed",
            "severity": "error",
            "reasons": [
                {"metric": "status", "old": "passed", "new": "failed", "message": "passed -> failed"}
            ],
        },
        {
            "kind": "op",
            "name": HOSTILE,
            "variant": "float32",
            "classification": "improved",
            "severity": "info",
            "reasons": [
                {"metric": "worst_headroom", "old": 0.5, "new": 0.1, "message": "headroom 0.5 -> 0.1 |x|"}
            ],
        },
        {
            "kind": "op",
            "name": "gelu",
            "variant": "float32",
            "classification": "unchanged",
            "severity": "info",
            "reasons": [],
        },
        {
            "kind": "kernel",
            "name": "gelu",
            "variant": "sm_80",
            "classification": "unchanged",
            "severity": "info",
            "reasons": [],
        },
    ],
}


def test_baseline_diff_table(runs: dict[str, dict[str, Any]]) -> None:
    report = report_of({**runs["failing"], "diff": DIFF})
    comment = render_comment(report)
    assert_renders_inert(comment)
    rendered = html.unescape(gfm(comment)).replace("\u200d", "")
    section = rendered.split("<h3>Baseline comparison</h3>", 1)[1]
    assert report.diff is not None and report.diff.summary_line.startswith("1 regression, 1 improved")
    assert report.diff.summary_line in section
    rows = re.findall(r"<tr>(.*?)</tr>", section.split("</table>", 1)[0], re.S)
    assert len(rows) == 3  # header, regressed, improved; unchanged ones are counted instead
    assert "regressed" in rows[1] and "passed -> failed" in rows[1] and "❌" in rows[1]
    assert f"<code>{HOSTILE}</code>" in rows[2] and "headroom 0.5 -> 0.1 |x|" in rows[2]
    assert "2 op × dtype and kernel × arch result(s) unchanged" in section
    assert "1 regression(s) against the baseline" in comment.splitlines()[1]


def test_a_real_baseline_diff(runs: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    from gpuemu_ci.config.model import Policies
    from gpuemu_ci.diff.baseline import BaselineSource, diff_against
    from gpuemu_ci.pipeline.gate import with_diff
    from gpuemu_ci.results.codec import to_builtins

    baseline = tmp_path / "baseline-results.json"
    baseline.write_text(json.dumps(runs["passing"]))
    current = report_of(copy.deepcopy(runs["failing"]))
    report = with_diff(current, diff_against(BaselineSource(baseline), current, Policies(), True))
    document = to_builtins(report)
    assert report.diff is not None and report.diff.status == "compared" and report.diff.regressions >= 1
    comment = render_comment(report)
    assert_renders_inert(comment)
    section = html.unescape(gfm(comment)).replace("\u200d", "").split("<h3>Baseline comparison</h3>", 1)[1]
    assert document["diff"]["summary_line"] in section
    regressed = [e for e in document["diff"]["entries"] if e["classification"] == "regressed"]
    rows = re.findall(r"<tr>(.*?)</tr>", section.split("</table>", 1)[0], re.S)[1:]
    assert len(rows) == len([e for e in document["diff"]["entries"] if e["classification"] != "unchanged"])
    for entry in regressed:
        row = next(
            r for r in rows if f"<code>{entry['name']}</code>" in r and f"<td>{entry['variant']}</td>" in r
        )
        icon = "❌" if entry["severity"] == "error" else "⚠️"  # headroom growth past warn_threshold warns
        assert icon in row and entry["reasons"][0]["message"] in row


def test_no_baseline_is_said_plainly(runs: dict[str, dict[str, Any]]) -> None:
    diff = {
        "status": "no_baseline",
        "message": "no gpuemu-baseline artifact for main yet: run the baseline workflow",
    }
    comment = render_comment(report_of({**runs["passing"], "diff": diff}))
    assert "No baseline comparison (no baseline): no gpuemu\\-baseline artifact" not in comment
    assert "No baseline comparison (no baseline): no gpuemu-baseline artifact for main yet" in comment


def test_html_report_is_escaped_and_links_only_http(runs: dict[str, dict[str, Any]]) -> None:
    report = report_of({**runs["mixed"], "diff": DIFF})
    page = render_html(report, Links(RUN_URL, "javascript:alert(1)"))
    assert page.startswith("<!DOCTYPE html>")
    assert "<img" not in page and "<script" not in page and "javascript:" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;|**bold**" in page
    assert f'<a href="{RUN_URL}">workflow run</a>' in page
    for section in (
        "Failures",
        "Errored: not judged",
        "Baseline comparison",
        "Skipped: not tested",
        "Passed",
    ):
        assert f">{section}</h2>" in page
    for failure in (f for op in runs["mixed"]["ops"] for f in op["failures"]):
        assert str(markupsafe.escape(failure["replay"])) in page


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        (
            {
                "repo": "octo/kernels",
                "run_id": "77",
                "run_attempt": 2,
                "server_url": "https://github.com",
                "job": "gate",
            },
            "https://github.com/octo/kernels/actions/runs/77/attempts/2",
        ),
        (
            {"repo": "octo/kernels", "run_id": "77", "server_url": "https://ghe.example/"},
            "https://ghe.example/octo/kernels/actions/runs/77",
        ),
        ({"repo": "octo/k](javascript:alert(1))", "run_id": "77", "server_url": "https://github.com"}, None),
        ({"repo": "octo/kernels", "run_id": "77", "server_url": "javascript:alert(1)//"}, None),
    ],
)
def test_the_run_link_comes_from_the_document_when_not_given(
    runs: dict[str, dict[str, Any]], run: dict[str, Any], expected: str | None
) -> None:
    report = report_of({**runs["passing"], "run": run})
    links = Links.for_results(report)
    assert links.run_url == expected
    comment = render_comment(report, links)
    assert ("[workflow run](" + expected + ")" in comment) if expected else "workflow run" not in comment
    if run.get("job"):
        assert comment.startswith(f"<!-- gpuemu-ci:v1 key={run['job']} -->")
