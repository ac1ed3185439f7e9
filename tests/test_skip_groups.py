"""The suite says what it did not test, and fails when what it skipped is what its own command installs
(tests/support_skips.py, wired in tests/conftest.py): run in a child pytest with this repository's conftest."""

from __future__ import annotations

import textwrap

import pytest

from tests.conftest import REPO
from tests.support_skips import MAY_SKIP_VARIABLE, SkipSummary

INNER_TESTS = """
import pytest

def test_runs():
    pass

def test_needs_a_gpu():
    pytest.skip("no GPU on this machine")

def test_needs_torch():
    pytest.skip({torch_reason!r})
"""


def _run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, torch_reason: str, may_skip: str = ""
) -> pytest.RunResult:
    pytester.makeconftest(
        "from tests.conftest import pytest_collectreport, pytest_runtest_logreport, pytest_sessionfinish, "
        "pytest_terminal_summary  # noqa: F401\n"
    )
    pytester.makepyfile(test_inner=textwrap.dedent(INNER_TESTS.format(torch_reason=torch_reason)))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv(MAY_SKIP_VARIABLE, may_skip)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider")


@pytest.mark.slow
def test_a_green_run_names_what_it_skipped_in_its_last_lines(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run(pytester, monkeypatch, torch_reason="a GPU is present: the op would run")
    assert result.ret == 0
    tail = result.stdout.lines[-3:]
    assert any("skipped test groups:" in line and "GPU (1 test: no NVIDIA GPU" in line for line in tail), tail
    assert any("no-GPU paths (1 test" in line for line in tail), tail


@pytest.mark.slow
def test_a_skip_for_want_of_what_the_test_command_installs_fails_the_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run(pytester, monkeypatch, torch_reason="could not import 'torch': No module named 'torch'")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*FAILED: tests of torch were skipped*test-torch*"])


@pytest.mark.slow
def test_a_partial_environment_may_allow_the_skip_by_name(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run(
        pytester,
        monkeypatch,
        torch_reason="could not import 'torch': No module named 'torch'",
        may_skip="torch",
    )
    assert result.ret == 0
    assert "torch (1 test" in result.stdout.str()


@pytest.mark.parametrize(
    ("reason", "group", "broken"),
    [
        ("could not import 'triton': No module named 'triton'", "Triton", True),
        ("could not import 'jax': No module named 'jax'", "JAX", True),
        ("could not import 'cupy': No module named 'cupy'", "GPU", False),
        ("no Chromium here: to run these, install it (Debian: apt-get install chromium)", "Chromium", False),
        ("nvcc is not on PATH", "CUDA toolkit", False),
        ("mkdocs-material is not installed (it is in the test extra)", "the test extra", True),
        ("chown needs root", "other", False),
    ],
)
def test_each_skip_reason_lands_in_its_group(reason: str, group: str, broken: bool) -> None:
    summary = SkipSummary.of([reason])
    assert [g.name for g in summary.counts] == [group]
    assert bool(summary.broken_setup()) is broken
