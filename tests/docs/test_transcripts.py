"""The documentation's sample outputs are what the tool prints: every `console` block's `$ gpuemu-ci ...` command
is run as written, in a copy of the repository's examples, and each line the page shows must appear in what the
command printed, in the page's order (issue #51: the Triton example's page said `7/16 cases passed` with another
first failure while the tool printed `9/16`).

A page may leave lines out (only the lines it shows are checked), elide a line's end with `...`, and show a
run's wall time, which is not compared."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
CONSOLE_BLOCK = re.compile(r"```console\n(.*?)```", re.S)
WALL_TIME = re.compile(r"; \d+(\.\d+)?s$")


@dataclass(frozen=True)
class Transcript:
    page: str
    command: str
    shown: tuple[str, ...]  # the lines the page shows after the command, up to the next prompt

    @property
    def id(self) -> str:
        return f"{self.page}: {self.command}"


def transcripts() -> list[Transcript]:
    found = []
    for page in PAGES:
        for block in CONSOLE_BLOCK.findall(page.read_text(encoding="utf-8")):
            command: str | None = None
            shown: list[str] = []
            for line in [*block.splitlines(), "$ "]:
                if line.startswith("$ "):
                    if command is not None:
                        found.append(Transcript(page.relative_to(REPO).as_posix(), command, tuple(shown)))
                    command, shown = line[2:].strip() or None, []
                elif line.strip():
                    shown.append(line)
    return found


def _matches(shown: str, printed: str) -> bool:
    shown, printed = shown.strip(), printed.strip()
    if WALL_TIME.search(shown):
        shown, printed = WALL_TIME.sub("", shown), WALL_TIME.sub("", printed)
    if shown.endswith("..."):  # the page elides the rest of the line
        return printed.startswith(shown[:-3].rstrip("; ").rstrip())
    return shown == printed


def unmatched(shown: tuple[str, ...], printed: list[str]) -> list[str]:
    """The shown lines not found in order in the printed ones (a shown `...` line stands for any lines)."""
    missing, position = [], 0
    for line in shown:
        if line.strip() == "...":
            continue
        at = next((i for i in range(position, len(printed)) if _matches(line, printed[i])), None)
        if at is None:
            missing.append(line)
        else:
            position = at + 1
    return missing


def _needs(command: str) -> list[str]:
    frameworks = {"examples/torch/": ["torch"], "examples/triton/": ["torch", "triton"]}
    return next((needed for prefix, needed in frameworks.items() if prefix in command), [])


def test_the_transcripts_are_found() -> None:
    found = transcripts()
    assert len(found) >= 7, [t.id for t in found]
    assert all(t.command.startswith("gpuemu-ci ") and t.shown for t in found), found


@pytest.mark.slow
@pytest.mark.parametrize("transcript", transcripts(), ids=lambda t: t.id)
def test_a_documented_transcript_is_what_the_command_prints(transcript: Transcript, tmp_path: Path) -> None:
    for module in _needs(transcript.command):
        if find_spec(module) is None:
            pytest.skip(f"could not import {module!r}: the transcript's example needs it")
    if "examples/cuda/" in transcript.command:
        from gpuemu_ci.backends import detect_gpu

        if detect_gpu() is not None:
            pytest.skip("a GPU is present: the page shows the run on a machine without one")
    shutil.copytree(
        REPO / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("gpuemu-out", "__pycache__")
    )
    env = {**os.environ, "GPUEMU_USER_CONFIG": "none", "PYTHONPATH": str(REPO)}
    for key in [k for k in env if k.startswith("GITHUB_") or k == "TRITON_INTERPRET"]:
        del env[key]  # a user's shell, not a CI job: the tool decides how Triton runs
    args = shlex.split(transcript.command)
    done = subprocess.run(
        [sys.executable, "-m", "gpuemu_ci", *args[1:]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    printed = (done.stdout + done.stderr).splitlines()
    missing = unmatched(transcript.shown, printed)
    assert missing == [], (
        f"{transcript.page} shows lines `{transcript.command}` does not print (or not in that order):\n"
        + "\n".join(missing)
        + "\n--- it printed:\n"
        + "\n".join(printed[-60:])
    )


@pytest.mark.parametrize(
    ("shown", "printed", "ok"),
    [
        (("  PASS  a: 16/16 cases passed",), ["x", "  PASS  a: 16/16 cases passed"], True),
        (("  FAIL  a: 7/16 cases passed",), ["  FAIL  a: 9/16 cases passed"], False),
        (
            ("gpuemu-ci: PASSED - cases 3; seed 1; 19.8s",),
            ["gpuemu-ci: PASSED - cases 3; seed 1; 2.1s"],
            True,
        ),
        (("worst at (1, 2): got 4.1, ...",), ["worst at (1, 2): got 4.1, reference 2"], True),
        (("b", "..."), ["b", "a"], True),
        (("b", "a"), ["a", "b"], False),
    ],
)
def test_the_matching_rules(shown: tuple[str, ...], printed: list[str], ok: bool) -> None:
    assert (unmatched(shown, printed) == []) is ok
