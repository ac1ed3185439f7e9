"""Fixtures for the GitHub layer's tests: a client of the fake API (`fake_github`, in tests/conftest.py) that
records its sleeps instead of sleeping."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpuemu_ci.github.client import GitHubClient
from tests.github.support_fake_api import FakeGitHub, SleepRecorder


@pytest.fixture
def sleeps() -> SleepRecorder:
    return SleepRecorder()


@pytest.fixture
def client(fake_github: FakeGitHub, sleeps: SleepRecorder) -> Iterator[GitHubClient]:
    with GitHubClient(
        fake_github.token,
        fake_github.api_url,
        sleep=sleeps,
        clock=lambda: 1_700_000_000.0,
        jitter=lambda: 0.0,
    ) as gh:
        yield gh
