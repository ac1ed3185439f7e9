"""Fixtures for the backend tests: user code in a temporary root, and one worker pool for the session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuemu_ci.backends import WorkerPool
from tests.backends.support_cases import write_user_code


@pytest.fixture(scope="session")
def user_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_user_code(tmp_path_factory.mktemp("userroot"))


@pytest.fixture(scope="session")
def pool(user_root: Path) -> Iterator[WorkerPool]:
    with WorkerPool(1, user_root, gpu=None) as p:
        yield p
