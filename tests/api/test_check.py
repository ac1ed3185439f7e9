"""gpuemu_ci.check(): the client-side workflow from a user's own test code."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

import gpuemu_ci
from gpuemu_ci.api import OpCheckFailed
from tests.conftest import EXAMPLES

QUICKSTART = EXAMPLES / "quickstart" / "gpuemu.toml"


@pytest.fixture
def quickstart_kernels(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES / "quickstart"))
    from kernels.softmax import softmax  # type: ignore[import-not-found]  # examples/quickstart, on sys.path now

    yield softmax
    for name in [m for m in sys.modules if m == "kernels" or m.startswith("kernels.")]:
        del sys.modules[name]


def test_a_correct_lambda_passes_in_process(quickstart_kernels, tmp_path):
    result = gpuemu_ci.check(
        "softmax", lambda x: quickstart_kernels(x), config=QUICKSTART, out_dir=tmp_path, iterations=4
    )
    assert result.status.value == "passed" and result.cases_total == 8  # 4 cases x 2 quick dtypes


def test_a_buggy_callable_raises_with_replay_seeds(quickstart_kernels, tmp_path):
    @np.errstate(all="ignore")
    def softmax_without_max_subtraction(x):  # overflows for large inputs
        e = np.exp(x.astype(np.float32))
        return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype)

    with pytest.raises(OpCheckFailed) as info:
        gpuemu_ci.check("softmax", softmax_without_max_subtraction, config=QUICKSTART, out_dir=tmp_path)
    text = str(info.value)
    # A function defined inside the test cannot be imported by a worker: its replay is a check() of it.
    assert "softmax failed" in text and "replay: gpuemu_ci.check('softmax'" in text and "seeds=[" in text
    assert isinstance(info.value, AssertionError)  # pytest reports it as a test failure
    assert info.value.result.cases_failed > 0


def test_a_failure_names_layouts_and_strides_and_the_seed_as_the_cli_does(quickstart_kernels, tmp_path):
    """A kernel that mishandles strided inputs: the lines say which layout and strides failed (issue #27)."""

    def softmax_wrong_on_strided_inputs(x):
        out = quickstart_kernels(np.ascontiguousarray(x))
        return out if x.flags.c_contiguous else out * 2

    with pytest.raises(OpCheckFailed) as info:
        gpuemu_ci.check("softmax", softmax_wrong_on_strided_inputs, config=QUICKSTART, out_dir=tmp_path)
    failures = [line for line in str(info.value).splitlines() if line.startswith("- ")]
    assert failures, str(info.value)
    for line in failures:  # only non-contiguous cases fail, and each says how its input was laid out
        assert re.match(
            r"- mismatch \[\w+\] x\(\d+, \d+\) [a-z_]+ strides \(\d+, \d+\) \S+ seed \d+: ", line
        ), line
        assert " contiguous strides" not in line


@pytest.mark.slow
def test_an_importable_function_runs_in_an_isolated_worker(make_project, tmp_path, monkeypatch):
    config = make_project(
        """
        [ci]
        quick_iterations = 3
        [[ops]]
        name = "double"
        op = "userops:double"
        reference = "userops:double_ref"
        family = "elementwise"
        [ops.dims]
        N = [8, 32]
        [ops.inputs]
        x = ["N"]
    """,
        {
            "userops.py": """
        import os
        import numpy as np
        def double(x):
            return (x * 2).astype(x.dtype)
        def double_ref(x):
            return x * 2
        def crashes(x):
            os._exit(3)
    """
        },
    )
    monkeypatch.syspath_prepend(str(config.parent))
    import userops  # type: ignore[import-not-found]  # written by this test, on sys.path now

    assert gpuemu_ci.check("double", userops.double, config=config, out_dir=tmp_path).status.value == "passed"
    # Isolation: a crash in the worker is a recorded failure, not the end of the test process.
    with pytest.raises(OpCheckFailed) as info:
        gpuemu_ci.check("double", userops.crashes, config=config, out_dir=tmp_path)
    assert info.value.result.failures[0].kind == "crashed"
    del sys.modules["userops"]


def test_an_unknown_op_is_a_clear_error():
    from gpuemu_ci.errors import ConfigError

    with pytest.raises(ConfigError, match="is not an op"):
        gpuemu_ci.check("nope", lambda x: x, config=QUICKSTART)


def off_by_a_lot(x):
    """A buggy softmax defined right here, in a test module: it must still run isolated, as pytest imported it."""
    return (np.exp(x.astype(np.float32)) / np.float32(x.shape[-1])).astype(x.dtype)


@pytest.mark.slow
def test_a_function_of_a_test_module_runs_isolated_and_its_replay_command_replays_it(tmp_path, cli):
    with pytest.raises(OpCheckFailed) as info:
        gpuemu_ci.check("softmax", off_by_a_lot, config=QUICKSTART, out_dir=tmp_path, iterations=2)
    failures = info.value.result.failures
    assert failures and all(f.kind != "raised" for f in failures)  # it loaded and ran in the worker
    command = failures[0].replay
    assert "--target" in command and "test_check.py:off_by_a_lot" in command
    replayed = cli(*command.split()[1:], "--out", tmp_path / "replay")
    assert replayed.code == 1 and "REPRODUCED" in replayed.stderr, replayed.stderr


def test_a_closure_failure_says_how_to_replay_it_with_seeds(quickstart_kernels, tmp_path):
    scale = np.float32(1.01)
    with pytest.raises(OpCheckFailed) as info:
        gpuemu_ci.check("softmax", lambda x: quickstart_kernels(x) * scale, config=QUICKSTART, out_dir=tmp_path,
                        iterations=2)  # fmt: skip
    failure = info.value.result.failures[0]
    assert f"seeds=[{failure.case_seed}]" in failure.replay
    with pytest.raises(OpCheckFailed) as again:
        gpuemu_ci.check("softmax", lambda x: quickstart_kernels(x) * scale, config=QUICKSTART, out_dir=tmp_path,
                        seeds=[failure.case_seed])  # fmt: skip
    assert (
        again.value.result.cases_total == 1 and again.value.result.failures[0].case_seed == failure.case_seed
    )


@pytest.mark.slow
def test_pytest_shows_the_failure_not_gpuemu_ci_frames(pytester):
    pytester.makepyfile(
        test_user=f"""
        import numpy as np
        import gpuemu_ci

        def wrong(x):
            return (x * 2).astype(x.dtype)

        def test_wrong():
            gpuemu_ci.check("gelu", wrong, config={str(QUICKSTART)!r}, iterations=1)
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    assert "gpuemu-ci: gelu failed" in output
    assert "gpuemu_ci/api.py" not in output and "gpuemu_ci/pipeline" not in output


HUGE = """
[validation]
dtypes = ["float32"]
{ci}
[[ops]]
name = "double"
op = "ops:double"
reference = "ops:double"
family = "elementwise"
[ops.dims]
M = {{ min = 1, max = 4194304, typical = [4194304] }}
N = {{ min = 1, max = 4194304, typical = [4194304] }}
[ops.inputs]
x = ["M", "N"]
"""


@pytest.mark.slow
@pytest.mark.parametrize("allowed", [False, True])
def test_a_check_with_cases_this_machine_cannot_hold_never_passes_unless_skips_are_allowed(
    make_project, tmp_path, allowed: bool
) -> None:
    """The typical 4M x 4M cases (64 TiB) are skipped on every machine; the others pass. Issue 41: a check
    whose cases did not all run was a pass; it raises unless `[ci] allow_skips = true`."""
    config = make_project(
        HUGE.format(ci="[ci]\nallow_skips = true" if allowed else ""),
        {"ops.py": "def double(x):\n    return x * 2\n"},
    )
    double = lambda x: x * 2  # noqa: E731  (in process: the cases that fit run here)
    if not allowed:
        with pytest.raises(OpCheckFailed, match="skipped cases never count as passed"):
            gpuemu_ci.check("double", double, config=config, out_dir=tmp_path, iterations=16)
        return
    result = gpuemu_ci.check("double", double, config=config, out_dir=tmp_path, iterations=16)
    assert result.cases_skipped > 0 and result.cases_passed == result.cases_total - result.cases_skipped
