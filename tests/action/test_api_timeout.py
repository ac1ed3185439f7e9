"""The time the Action may spend on GitHub's API in all: the input `api_timeout`, else GPUEMU_API_TIMEOUT, else
300 s; anything but a number of seconds in (0, 6 h] is refused, naming where it came from."""

from __future__ import annotations

import pytest

from gpuemu_ci.action.inputs import API_TIMEOUT_VARIABLE, api_timeout
from gpuemu_ci.errors import UsageError
from gpuemu_ci.github.limits import DEFAULT_TOTAL_S


def test_the_input_wins_then_the_variable_then_the_default() -> None:
    assert api_timeout("45", "90") == (45.0, "input api_timeout")
    assert api_timeout(None, "90") == (90.0, API_TIMEOUT_VARIABLE)
    assert api_timeout(None, " ") == (DEFAULT_TOTAL_S, "")
    assert api_timeout(None, None) == (DEFAULT_TOTAL_S, "")
    assert api_timeout("2.5", None) == (2.5, "input api_timeout")


@pytest.mark.parametrize("bad", ["0", "-5", "soon", "nan", "inf", "21601", "1e9"])
def test_anything_but_seconds_within_a_job_is_refused(bad: str) -> None:
    with pytest.raises(UsageError, match=f"input api_timeout={bad!r}: expected a number of seconds"):
        api_timeout(bad, None)
    with pytest.raises(UsageError, match=f"{API_TIMEOUT_VARIABLE}={bad!r}"):
        api_timeout(None, bad)
