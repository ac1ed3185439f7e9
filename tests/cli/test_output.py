"""What a person reads while `gpuemu-ci run` works: periodic progress lines in a CI log, one overall bar on a
terminal, colour only where it belongs, and every op listed once."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpuemu_ci.terminal import Style, duration
from tests.conftest import EXAMPLES

SLOW_PROJECT = """
[project]
name = "slow"

[ci]
quick_iterations = 4

[[ops]]
name = "slow_copy"
op = "slow_ops:slow_copy"
reference = "slow_ops:copy"
family = "elementwise"
[ops.dims]
N = [8]
[ops.inputs]
x = ["N"]

[[ops]]
name = "fast_copy"
op = "slow_ops:copy"
reference = "slow_ops:copy"
family = "elementwise"
[ops.dims]
N = [8]
[ops.inputs]
x = ["N"]
"""

SLOW_OPS = """
import time

def slow_copy(x):
    time.sleep(0.4)
    return x.copy()

def copy(x):
    return x.copy()
"""


@pytest.fixture
def slow_project(tmp_path: Path) -> Path:
    (tmp_path / "gpuemu.toml").write_text(textwrap.dedent(SLOW_PROJECT))
    (tmp_path / "slow_ops.py").write_text(textwrap.dedent(SLOW_OPS))
    return tmp_path


def run_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    return {**env, "GPUEMU_USER_CONFIG": "none", **extra}


@pytest.mark.slow
def test_a_ci_log_gets_periodic_progress_lines_and_each_op_once(slow_project: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gpuemu_ci", "run", "--out", "out", "--jobs", "1"],
        cwd=slow_project,
        env=run_env(GPUEMU_PROGRESS_SECONDS="0.5"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    log = done.stderr
    progress = [line for line in log.splitlines() if line.startswith("gpuemu-ci: progress ")]
    assert progress, log  # a slow op is never silent in CI
    # The cases of every op are in flight at once (workers take them in plan order): each running op is listed.
    running = r"running slow_copy \d/4(, fast_copy \d/4)?; \d+s elapsed"
    assert re.search(r"progress \d+/8 cases \(\d+%\), 0 failed; " + running, log), log
    assert "\r" not in log and "\x1b[" not in log  # a CI log has no bar and no colour
    # Each op's outcome appears once, in the summary.
    assert len(re.findall(r"^\s+PASS\s+slow_copy: 4/4 cases passed$", log, re.M)) == 1
    assert len(re.findall(r"slow_copy: .*cases passed", log)) == 1


def run_in_a_terminal(cwd: Path, env: dict[str, str]) -> str:
    """`gpuemu-ci run` with stderr on a pseudo-terminal; everything it drew there."""
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "gpuemu_ci", "run", "--out", "out", "--jobs", "1"],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=slave,
    )
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 300)
        if not ready:
            break
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    assert process.wait(timeout=60) == 0
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.slow
def test_a_terminal_gets_one_overall_bar_with_counts_and_an_estimate(slow_project: Path) -> None:
    drawn = run_in_a_terminal(slow_project, run_env(TERM="xterm"))
    bars = [part for part in drawn.split("\r") if "] " in part and "cases ·" in part]
    assert bars, drawn
    assert any(
        re.search(r"\] [1-7]/8 cases · .*0 failed.* · [01]/2 ops · \d+s elapsed, about \d+s left", b)
        for b in bars
    )
    assert "gpuemu-ci: progress" not in drawn  # the bar replaces the CI lines
    assert "\x1b[32mPASS" in drawn  # colour on a terminal
    assert len(re.findall(r"slow_copy: 4/4 cases passed", drawn)) == 1


@pytest.mark.slow
def test_no_color_wins_on_a_terminal(slow_project: Path) -> None:
    drawn = run_in_a_terminal(slow_project, run_env(TERM="xterm", NO_COLOR="1"))
    assert "\x1b[32m" not in drawn and "\x1b[1;31m" not in drawn and "PASS" in drawn


@pytest.mark.slow
def test_force_color_colours_a_ci_log(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gpuemu_ci", "run", "--config", EXAMPLES / "buggy" / "gpuemu.toml",
         "--op", "softmax", "--iterations", "2", "--out", tmp_path],
        cwd=EXAMPLES / "buggy",
        env=run_env(FORCE_COLOR="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 1
    assert "\x1b[1;31mFAIL" in done.stderr and "\x1b[1;31mFAILED\x1b[0m" in done.stderr
    assert "\r" not in done.stderr  # still no bar: it is not a terminal


@pytest.mark.parametrize(
    ("env", "tty", "colour"),
    [({}, True, True), ({}, False, False), ({"NO_COLOR": "1"}, True, False), ({"FORCE_COLOR": "1"}, False, True),
     ({"FORCE_COLOR": "0"}, True, False), ({"TERM": "dumb"}, True, False)],
)  # fmt: skip
def test_colour_follows_no_color_force_color_and_the_terminal(
    env: dict[str, str], tty: bool, colour: bool
) -> None:
    class Stream:
        def isatty(self) -> bool:
            return tty

    assert Style.for_stream(Stream(), env).colour is colour  # type: ignore[arg-type]


def test_durations_read_like_a_person_writes_them() -> None:
    assert [duration(s) for s in (0.4, 59.6, 185, 3725)] == ["0s", "1m00s", "3m05s", "1h02m"]
