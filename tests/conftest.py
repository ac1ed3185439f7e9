"""Shared fixtures: a small project written to a temporary directory, the repository's examples, and the fake
GitHub API on 127.0.0.1."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.github.support_fake_api import FakeGitHub
from tests.support_cli import CliResult, run_cli
from tests.support_skips import MAY_SKIP_VARIABLE, TEST_COMMAND, SkipSummary, reason_of
from tests.support_tiers import mark_tests_of_costly_fixtures_slow

# Fixtures for signed reports (a results document, keys, envelopes), shared by tests/attest and tests/cli.
pytest_plugins = ["tests.support_reports", "pytester"]

# Property-based tests: the same examples on every run (a red CI run is red again on a laptop), no example
# database written into the checkout, and no deadline (the machine's load must not fail a test). The autouse
# fixture below only sets an environment variable, which may be shared by every example of a test.
# Budgets, chosen by HYPOTHESIS_PROFILE: `fast` (the default, what `.ci/check` runs) tries few examples per test
# so the fast tier stays fast; `ci` (what `.ci/run` selects) tries many; `explore` searches further still, with
# fresh random examples each run. A failing example is printed with its blob, so any profile can replay it.
FAST_EXAMPLES = 25
CI_EXAMPLES = 500
settings.register_profile(
    "fast",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    max_examples=FAST_EXAMPLES,
)
settings.register_profile("ci", settings.get_profile("fast"), max_examples=CI_EXAMPLES)
settings.register_profile("explore", settings.get_profile("fast"), derandomize=False, max_examples=5000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


@pytest.fixture(autouse=True)
def _no_user_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's ~/.config/gpuemu/config.toml (and upstream's ~/.gpuemu/daemon.toml) must not leak into
    tests."""
    monkeypatch.setenv("GPUEMU_USER_CONFIG", "none")
    monkeypatch.setenv("GPUEMU_DAEMON_CONFIG", "none")


@pytest.fixture
def fake_github() -> Iterator[FakeGitHub]:
    """The fake GitHub API; every response it sent is checked against GitHub's OpenAPI description at teardown,
    so the fake cannot drift from the real API without a test failing."""
    with FakeGitHub() as fake:
        yield fake
    fake.check_responses_against_openapi()


@pytest.fixture
def cli() -> Callable[..., CliResult]:
    """`cli("run", "--config", path)`: the real `gpuemu-ci` in-process -> CliResult(code, stdout, stderr)."""

    def invoke(
        *args: str | Path, cwd: Path | None = None, env: dict[str, str | None] | None = None
    ) -> CliResult:
        return run_cli(args, cwd=cwd, env=env)

    return invoke


@pytest.fixture
def make_project(tmp_path: Path) -> Callable[..., Path]:
    """Writes gpuemu.toml (and any extra files) into tmp_path; returns the config path."""

    def write(config: str, files: dict[str, str] | None = None) -> Path:
        for name, text in (files or {}).items():
            path = tmp_path / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text))
        config_path = tmp_path / "gpuemu.toml"
        config_path.write_text(textwrap.dedent(config))
        return config_path

    return write


SIMPLE_OPS = """
import numpy as np

def scale(x, factor=2.0):
    return (x.astype(np.float32) * np.float32(factor)).astype(x.dtype)

def scale_ref(x, factor=2.0):
    return x * factor

def wrong_shape(x, factor=2.0):
    return x[..., :-1] if x.shape[-1] > 1 else np.zeros((2, 2, 2), x.dtype)

def wrong_dtype(x, factor=2.0):
    return (x * factor).astype(np.float64)

def raises(x, factor=2.0):
    raise RuntimeError("reference blew up")
"""


@pytest.fixture
def simple_project(make_project: Callable[..., Path]) -> Callable[..., Path]:
    """A project with one elementwise op `scale` in package `myops`; `op`/`reference` can be swapped."""

    def write(op: str = "myops.ops:scale", reference: str = "myops.ops:scale_ref", extra: str = "") -> Path:
        return make_project(
            f"""
            [project]
            name = "simple"

            [validation]
            dtypes = ["float32", "float16"]

            [ci]
            quick_iterations = 4

            [[ops]]
            name = "scale"
            op = "{op}"
            reference = "{reference}"
            family = "elementwise"
            kwargs = {{ factor = [2.0, 0.5] }}
            {extra}
            [ops.dims]
            M = [4, 16]
            N = {{ min = 1, max = 64, typical = [16, 32] }}
            [ops.inputs]
            x = ["M", "N"]
            """,
            {"myops/__init__.py": "", "myops/ops.py": SIMPLE_OPS},
        )

    return write


# --- The fast tier: a test that uses a fixture marked `runs_a_gate` is `slow` (tests/support_tiers.py). First, so
# that pytest's `-m` selection sees the mark.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_tests_of_costly_fixtures_slow(items)


# --- What a green run did not test: the last lines name each group of skipped tests and why (tests/support_skips).
_skip_reasons: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _skip_reasons.append(reason_of(report.longrepr))


def pytest_collectreport(report: pytest.CollectReport) -> None:
    # A module skipped whole at import (pytest.importorskip at module level) is one skip per module.
    if report.skipped:
        _skip_reasons.append(reason_of(report.longrepr))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    broken = SkipSummary.of(_skip_reasons).broken_setup()
    if broken and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> Iterator[None]:
    # A wrapper, so these lines come after pytest's own short summary: the last lines before the totals.
    yield
    summary = SkipSummary.of(_skip_reasons)
    terminalreporter.write_sep("-", "what this run did not test")
    terminalreporter.write_line(summary.line())
    broken = summary.broken_setup()
    if broken:
        names = ", ".join(group.name for group in broken)
        terminalreporter.write_line(
            f"FAILED: tests of {names} were skipped, but the README's test command installs {names}: run "
            f"`{TEST_COMMAND}` (or set {MAY_SKIP_VARIABLE}={','.join(g.name.lower() for g in broken)} "
            "for a deliberately partial environment)",
            red=True,
        )
