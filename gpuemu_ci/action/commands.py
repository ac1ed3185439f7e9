"""Workflow commands and the step's file commands (``GITHUB_OUTPUT``, ``GITHUB_STEP_SUMMARY``).

Escaping follows the runner (``ActionCommand.cs``): in a command's message ``%``, CR and LF are
percent-encoded; in its properties ``:`` and ``,`` too. Without that a message with a newline
ends the command early and a file name with a comma splits into two properties.

Limits that GitHub applies silently are applied visibly: a step summary over 1 MiB is dropped whole, so
``append_step_summary`` truncates to fit (annotations and their per-level cap: render/annotations.py).
Outputs use the heredoc form with a random delimiter, so any value (multi-line, ``=``) is safe.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from gpuemu_ci.render.escape import workflow_command
from gpuemu_ci.render.text import clip_utf8

STEP_SUMMARY_LIMIT = 1024 * 1024
_SUMMARY_CUT = "\n\n… (step summary truncated at GitHub's 1 MiB limit; the full report is in the artifact)\n"
_OUTPUT_NAME_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


@dataclass(frozen=True)
class SummaryWrite:
    """What ``append_step_summary`` wrote."""

    bytes_written: int
    truncated: bool


# One escaping implementation for every workflow command (render/escape.py).
format_command = workflow_command


def add_mask(value: str, *, stream: TextIO | None = None) -> None:
    """Ask the runner to mask ``value`` in logs; multi-line values also line by line."""
    out = stream if stream is not None else sys.stdout
    if not value:
        return
    print(format_command("add-mask", value), file=out)
    lines = [line.strip() for line in value.splitlines()]
    if len(lines) > 1:
        for line in lines:
            if len(line) >= 4:  # masking "}" or "" would blank unrelated log text
                print(format_command("add-mask", line), file=out)
    out.flush()


@contextmanager
def group(title: str, *, stream: TextIO | None = None) -> Iterator[None]:
    """A collapsible log group."""
    out = stream if stream is not None else sys.stdout
    print(format_command("group", title), file=out, flush=True)
    try:
        yield
    finally:
        print("::endgroup::", file=out, flush=True)


@contextmanager
def untrusted_output(stream: TextIO | None = None) -> Iterator[None]:
    """Turn workflow commands off while code under test prints to the log (`::stop-commands::`), so that a
    line it prints such as `::add-mask::` or `::error::` is shown, not obeyed. The token is random, and the
    code under test cannot read the log, so it cannot turn the commands back on itself."""
    out = stream if stream is not None else sys.stdout
    token = secrets.token_hex(16)
    print(f"::stop-commands::{token}", file=out, flush=True)
    try:
        yield
    finally:
        print(f"::{token}::", file=out, flush=True)


def set_outputs(path: Path | str | None, outputs: Mapping[str, object]) -> bool:
    """Append step outputs to the ``GITHUB_OUTPUT`` file; False when there is none (not in Actions).

    Values: ``str(value)``, booleans as ``true``/``false``, None as empty. (The Action writes its file
    commands through `step_files`, never by path.)
    """
    if not path:
        return False
    with Path(path).open("a", encoding="utf-8", newline="\n") as fh:
        fh.write(format_outputs(outputs))
    return True


def format_outputs(outputs: Mapping[str, object]) -> str:
    """The ``GITHUB_OUTPUT`` lines of `outputs`, in the heredoc form with a random delimiter."""
    chunks = []
    for name, value in outputs.items():
        if not name or not set(name) <= _OUTPUT_NAME_OK:
            raise ValueError(f"invalid output name {name!r}")
        text = _output_text(value)
        delimiter = f"ghadelimiter_{secrets.token_hex(16)}"
        while delimiter in text:  # vanishingly rare, but a collision would corrupt the file
            delimiter = f"ghadelimiter_{secrets.token_hex(16)}"
        chunks.append(f"{name}<<{delimiter}\n{text}\n{delimiter}\n")
    return "".join(chunks)


def append_step_summary(
    path: Path | str | None, markdown: str, *, limit: int = STEP_SUMMARY_LIMIT
) -> SummaryWrite:
    """Append Markdown to ``GITHUB_STEP_SUMMARY``, keeping the file within ``limit`` bytes.

    The runner rejects a summary over 1 MiB entirely; a cut summary with a note is more useful.
    Does nothing (0 bytes) when ``path`` is empty.
    """
    if not path:
        return SummaryWrite(0, False)
    target = Path(path)
    data, truncated = fit_step_summary(markdown, target.stat().st_size if target.exists() else 0, limit)
    with target.open("ab") as fh:
        fh.write(data)
    return SummaryWrite(len(data), truncated)


def fit_step_summary(markdown: str, used: int, limit: int = STEP_SUMMARY_LIMIT) -> tuple[bytes, bool]:
    """`markdown` as the bytes to append to a step summary that holds `used` bytes already, cut (with a note) to
    keep it within `limit`; and whether it was cut."""
    text = markdown if markdown.endswith("\n") else markdown + "\n"
    data = text.encode("utf-8")
    room = max(0, limit - used)
    truncated = len(data) > room
    if truncated:
        data = clip_utf8(text, room, _SUMMARY_CUT).encode("utf-8")
    return data, truncated


def _output_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
