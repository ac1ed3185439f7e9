"""The test tiers: `slow` marks a test of the full suite only; the fast tier is the rest (`-m "not slow"`).

`runs_a_gate` marks a fixture that does costly work (runs a whole gate, a Triton script through the
interpreter, a real compile): every test that uses it, directly or through another fixture, is marked `slow` at
collection (`tests/conftest.py`), so that the fixture never runs in the fast tier. Sharing it (module or session
scope) is what keeps the full suite affordable; the mark is what keeps the fast tier fast.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest

F = TypeVar("F", bound=Callable[..., object])

SLOW_FIXTURE = "gpuemu_tests_runs_a_gate"


def runs_a_gate(fixture_function: F) -> F:
    """Marks a fixture's function as costly; put it under `@pytest.fixture`."""
    setattr(fixture_function, SLOW_FIXTURE, True)
    return fixture_function


def uses_a_costly_fixture(item: pytest.Item) -> bool:
    """Whether the test uses (directly or through other fixtures) a fixture marked with `runs_a_gate`."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    for name in item.fixturenames:  # type: ignore[attr-defined]
        definitions = info.name2fixturedefs.get(name, ())
        if definitions and getattr(definitions[-1].func, SLOW_FIXTURE, False):
            return True
    return False


def mark_tests_of_costly_fixtures_slow(items: list[pytest.Item]) -> None:
    """Adds the `slow` mark to every test that uses a costly fixture (before `-m` selects)."""
    for item in items:
        if uses_a_costly_fixture(item):
            item.add_marker(pytest.mark.slow)
