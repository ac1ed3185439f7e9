"""Fixtures for the GitHub layer's tests: the fake API, checked against GitHub's OpenAPI contract.

Every response the fake sent during a test is validated at teardown against the vendored subset
of GitHub's published description (``openapi_check``), so the fake cannot drift from the real API
without a test failing.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpuemu_ci.github.client import GitHubClient
from tests.github.support_fake_api import FakeGitHub, SleepRecorder


@pytest.fixture
def fake_github() -> Iterator[FakeGitHub]:
    with FakeGitHub() as fake:
        yield fake
    fake.check_responses_against_openapi()


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
