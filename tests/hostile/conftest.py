"""Fixtures of the hostile tests that run code under test as real users (support_uids.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostile.support_uids import make_open_dir, shared_interpreter_command


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A temporary directory that every user can enter."""
    path = make_open_dir()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def shared_interpreter(open_dir: Path) -> list[str]:
    """A command prefix under which every user can run this interpreter (support_uids.py)."""
    return shared_interpreter_command(open_dir)
