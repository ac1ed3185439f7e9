"""requirements/*.lock: what the image installs, and nothing about the machine that wrote them.

A lock that carries pip options (an index URL, a find-links directory) makes every build of the image, a
user's included, look for that machine's paths: pip prints "Location ... is ignored" per file and per option,
and an index URL that does resolve somewhere else would change where the pinned files come from."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements"
# The image's locks (requirements/dev.lock, CI's universal lock with markers, is tests/packaging/test_locks.py's).
LOCKS = [REQUIREMENTS / "image.lock", REQUIREMENTS / "light.lock"]
# One logical line of a hashed lock: a pinned name and at least one sha256 (pip-compile --generate-hashes).
PINNED = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!_-]+(?: --hash=sha256:[0-9a-f]{64})+")


def logical_lines(text: str) -> list[str]:
    """The lock as pip reads it: comments and blank lines dropped, backslash continuations joined."""
    joined = re.sub(r"\\\n", " ", text)
    lines = (
        line.split(" #", 1)[0] if not line.lstrip().startswith("#") else "" for line in joined.splitlines()
    )
    return [" ".join(line.split()) for line in lines if line.strip()]


def test_both_locks_exist() -> None:
    assert all(p.is_file() for p in LOCKS)


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.name)
def test_a_lock_holds_only_pinned_hashed_requirements(lock: Path) -> None:
    """No option line of any kind (--index-url, --extra-index-url, --find-links, --trusted-host, -c ...)."""
    lines = logical_lines(lock.read_text(encoding="utf-8"))
    assert lines, f"{lock.name} pins nothing"
    assert [line for line in lines if not PINNED.fullmatch(line)] == []


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.name)
def test_a_lock_names_no_path_or_url(lock: Path) -> None:
    for line in logical_lines(lock.read_text(encoding="utf-8")):
        assert not re.search(r"file:|https?://|(^|\s)/[A-Za-z]", line), line


def test_the_reader_rejects_what_a_machine_config_leaks() -> None:
    """The check above would catch the lines pip-compile writes from a machine's pip configuration."""
    leaked = (
        "--extra-index-url file:///srv/mirror/simple\n--find-links /srv/wheels\n\nnumpy==2.5.5 \\\n    --hash=sha256:"
        + "0" * 64
        + "\n"
    )
    lines = logical_lines(leaked)
    assert [line for line in lines if not PINNED.fullmatch(line)] == lines[:2]
    assert PINNED.fullmatch(lines[2])


def test_lock_sh_switches_the_machine_config_off_and_emits_no_options() -> None:
    script = (REQUIREMENTS / "lock.sh").read_text(encoding="utf-8")
    assert "export PIP_CONFIG_FILE=/dev/null" in script
    for variable in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_CONSTRAINT"):
        assert re.search(rf"^unset .*\b{variable}\b", script, re.MULTILINE), variable
    for flag in (
        "--no-emit-index-url",
        "--no-emit-find-links",
        "--no-emit-trusted-host",
        "--no-emit-options",
    ):
        assert flag in script, flag
