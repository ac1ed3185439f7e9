"""Workflow commands, GITHUB_OUTPUT and GITHUB_STEP_SUMMARY, read back the way the runner reads them."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from gpuemu_ci.action.commands import (
    STEP_SUMMARY_LIMIT,
    add_mask,
    append_step_summary,
    group,
    set_outputs,
)
from gpuemu_ci.render.annotations import Annotation, Level, format_annotations
from gpuemu_ci.render.escape import workflow_command_data as escape_data
from gpuemu_ci.render.escape import workflow_command_property as escape_property
from tests.github.support_runner_parsers import parse_command, parse_github_output, unescape


def test_escaping_round_trips_through_the_runner_decoding() -> None:
    nasty = "100% done\r\nfile: a,b.cu::error::injected"
    assert escape_data("a%b\nc\rd") == "a%25b%0Ac%0Dd"
    assert escape_property("gpuemu.toml:12,3") == "gpuemu.toml%3A12%2C3"
    assert unescape(escape_data(nasty), prop=False) == nasty
    assert unescape(escape_property(nasty), prop=True) == nasty
    assert "\n" not in escape_data(nasty) and "," not in escape_property(nasty)


def test_annotation_points_at_the_config_line() -> None:
    line = Annotation(
        Level.ERROR,
        "softmax, float16: regression",
        "softmax: max error 3.2 ulp over the bound\nreplay: gpuemu-ci replay --seed 0x5eed",
        file="gpuemu.toml",
        line=12,
    ).command()
    name, props, message = parse_command(line)
    assert name == "error"
    assert props == {"file": "gpuemu.toml", "line": "12", "title": "softmax, float16: regression"}
    assert message.endswith("--seed 0x5eed") and "\n" in message
    assert "\n" not in line


def test_messages_are_cut_to_the_runner_limit() -> None:
    line = Annotation(Level.WARNING, "t", "x" * 10_000).command()
    _, _, message = parse_command(line)
    assert len(message) == 4096 and message.endswith("…")


def test_at_most_ten_per_level_and_a_notice_counts_the_rest() -> None:
    annotations = [Annotation(Level.ERROR, "t", f"error {i}") for i in range(13)]
    annotations += [Annotation(Level.WARNING, "t", f"warning {i}") for i in range(2)]
    commands = [parse_command(line) for line in format_annotations(annotations).splitlines()]
    errors = [m for n, _, m in commands if n == "error"]
    assert errors == [f"error {i}" for i in range(10)]  # the first (most important) ten
    assert [m for n, _, m in commands if n == "warning"] == ["warning 0", "warning 1"]
    assert commands[-1][0] == "notice" and commands[-1][2].startswith("3 more annotation(s) not shown")


def test_the_summary_notice_takes_a_notice_slot_when_notices_are_full() -> None:
    annotations = [Annotation(Level.NOTICE, "t", f"n{i}") for i in range(12)]
    notices = format_annotations(annotations).splitlines()
    assert len(notices) == 10
    assert parse_command(notices[-1])[2].startswith("3 more")


def test_nothing_dropped_means_no_notice() -> None:
    assert format_annotations([Annotation(Level.ERROR, "", "one")]).splitlines() == ["::error::one"]


def test_outputs_are_multiline_safe(tmp_path: Path) -> None:
    path = tmp_path / "output"
    path.write_text("earlier=1\n", encoding="utf-8")
    values = {
        "verdict": "failed",
        "regressions": "softmax\nmatmul=bf16",
        "ops_passed": 3,
        "comment": True,
        "comment_url": None,
        "tricky": "ghadelimiter_\nEOF\n<<",
    }
    assert set_outputs(path, values) is True
    parsed = parse_github_output(path.read_text(encoding="utf-8"))
    assert parsed == {
        "earlier": "1",
        "verdict": "failed",
        "regressions": "softmax\nmatmul=bf16",
        "ops_passed": "3",
        "comment": "true",
        "comment_url": "",
        "tricky": "ghadelimiter_\nEOF\n<<",
    }


def test_outputs_outside_actions_are_a_no_op() -> None:
    assert set_outputs(None, {"verdict": "passed"}) is False
    assert set_outputs("", {"verdict": "passed"}) is False


def test_output_names_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="invalid output name"):
        set_outputs(tmp_path / "o", {"bad name<<": "x"})


def test_step_summary_appends_and_stays_under_one_mib(tmp_path: Path) -> None:
    path = tmp_path / "summary.md"
    first = append_step_summary(path, "# gpuemu-ci\n")
    assert first.bytes_written == len("# gpuemu-ci\n") and not first.truncated
    big = append_step_summary(path, "| op | ok |\n" * 200_000)  # 2.4 MB of table rows
    assert big.truncated
    data = path.read_bytes()
    assert len(data) <= STEP_SUMMARY_LIMIT
    assert data.startswith(b"# gpuemu-ci\n")
    assert b"truncated at GitHub's 1 MiB limit" in data
    full = append_step_summary(path, "more")  # the file is full: nothing more fits
    assert full.truncated and full.bytes_written == 0
    assert path.read_bytes() == data


def test_step_summary_cut_keeps_utf8_valid(tmp_path: Path) -> None:
    path = tmp_path / "summary.md"
    append_step_summary(path, "ü" * 1000, limit=501)
    path.read_bytes().decode("utf-8")  # raises if a character was split
    assert len(path.read_bytes()) <= 501


def test_step_summary_outside_actions(tmp_path: Path) -> None:
    assert append_step_summary(None, "x").bytes_written == 0


def test_add_mask_masks_the_value_and_each_line_of_a_key() -> None:
    out = io.StringIO()
    key = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIJ+secret\n-----END PRIVATE KEY-----"
    add_mask(key, stream=out)
    masked = [parse_command(line) for line in out.getvalue().splitlines()]
    assert all(name == "add-mask" for name, _, _ in masked)
    assert [m for _, _, m in masked] == [key, *key.split("\n")]


def test_group() -> None:
    out = io.StringIO()
    with group("lint: sm_90", stream=out):
        print("ptxas output", file=out)
    assert out.getvalue().splitlines() == ["::group::lint: sm_90", "ptxas output", "::endgroup::"]
