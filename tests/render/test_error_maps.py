"""The pattern line and error map of a failing case in every renderer (issue #47), from a real run of
examples/buggy (its softmax fails: the padding of the last tile leaks into the sum)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuemu_ci.render.html import render_html
from gpuemu_ci.render.junit import render_junit
from gpuemu_ci.render.markdown import render_comment, render_summary
from gpuemu_ci.render.sarif import render_sarif
from gpuemu_ci.render.summary import print_summary
from gpuemu_ci.results.codec import read_results
from gpuemu_ci.results.model import Failure, Results
from tests.support_cli import run_cli
from tests.support_real_runs import real_run_dir

pytestmark = pytest.mark.slow  # a real gate run (once per session)


@pytest.fixture(scope="module")
def failing(tmp_path_factory: pytest.TempPathFactory) -> tuple[Results, Path]:
    where = real_run_dir(tmp_path_factory.getbasetemp(), "failing")
    return read_results(where / "results.json"), where


def _recorded(report: Results) -> list[Failure]:
    return [f for op in report.ops for f in op.failures if f.kind == "mismatch"]


def test_each_wrong_answer_records_its_pattern_and_a_map_beside_the_snapshot(
    failing: tuple[Results, Path],
) -> None:
    report, where = failing
    failures = _recorded(report)
    assert failures
    for failure in failures:
        assert failure.pattern and "over the allowance" in failure.pattern
        assert failure.error_map is not None and failure.error_map_note is None
        assert (where / failure.error_map).read_bytes().startswith(b"\x89PNG")


def test_the_comment_summary_junit_and_sarif_carry_the_pattern(failing: tuple[Results, Path]) -> None:
    report, _ = failing
    worst = next(g.worst for g in report.failure_groups() if g.worst is not None)
    assert worst.pattern is not None and worst.error_map is not None
    comment = render_comment(report)
    assert f"where the output is wrong: {worst.pattern}" in comment.replace("\\", "")
    assert worst.error_map in comment
    assert f"where the output is wrong: {worst.pattern}" in render_summary(report).replace("\\", "")
    assert f"pattern: {worst.pattern}" in render_junit(report)
    assert f"Pattern: {worst.pattern}" in render_sarif(report)


def test_the_html_report_inlines_each_map_and_says_why_one_is_missing(
    failing: tuple[Results, Path], tmp_path: Path
) -> None:
    report, where = failing
    page = render_html(report, results_dir=where)
    assert "img-src data:" in page  # the report's CSP lets the inlined PNGs show, nothing else
    assert page.count('<img class="error-map" src="data:image/png;base64,') == len(_recorded(report))
    elsewhere = render_html(report, results_dir=tmp_path)  # results.json copied without its snapshots
    assert "not found beside results.json" in elsewhere and "<img" not in elsewhere


def test_the_terminal_summary_prints_pattern_and_map(
    failing: tuple[Results, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    report, where = failing
    print_summary(report, where / "results.json")
    printed = capsys.readouterr()
    failure = report.ops[0].failures[0]
    assert f"pattern: {failure.pattern}" in printed.out + printed.err
    assert f"error map {failure.error_map}" in printed.out + printed.err


def test_replay_explain_prints_the_analysis(failing: tuple[Results, Path], tmp_path: Path) -> None:
    failure = _recorded(failing[0])[0]
    done = run_cli([*failure.replay.split()[1:], "--explain", "--out", tmp_path / "replayed"])
    assert done.code == 1, done.stderr
    assert "explain:" in done.stderr
    assert f"pattern: {failure.pattern}" in done.stderr
    drawn = done.stderr.split("error map: ", 1)[1].split()[0]
    assert Path(drawn).read_bytes().startswith(b"\x89PNG")
