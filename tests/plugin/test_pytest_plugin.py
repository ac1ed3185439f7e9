"""The pytest plugin in a fresh project: ops of gpuemu.toml as tests (`--gpuemu`) and the gpuemu_op fixture,
parametrized by op and dtype, failing seeds remembered and replayed first, options honoured, bad input
refused with a usage error."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from tests.plugin.support_plugin import plugin_registered, run, set_buggy, write_project


def test_the_installed_package_registers_the_plugin_with_pytest() -> None:
    assert plugin_registered(), "the pytest11 entry point 'gpuemu' is missing: run `pip install -e .`"


@pytest.mark.slow
def test_gpuemu_collects_every_op_and_dtype_of_the_config_and_k_selects_them(
    pytester: pytest.Pytester,
) -> None:
    write_project(pytester.path)
    listed = run(pytester, "--gpuemu", "--collect-only", "-q")
    ids = sorted(line for line in listed.outlines if "::" in line)
    assert ids == [
        "gpuemu.toml::scale-float32",
        "gpuemu.toml::softmax-float16",
        "gpuemu.toml::softmax-float32",
    ]

    selected = run(pytester, "--gpuemu", "-k", "softmax and float16", "-v")
    selected.assert_outcomes(passed=1, deselected=2)
    everything = run(pytester, "--gpuemu")
    everything.assert_outcomes(passed=3)
    assert run(pytester).ret == pytest.ExitCode.NO_TESTS_COLLECTED  # without --gpuemu nothing is collected


@pytest.mark.slow
def test_a_failing_op_shows_its_replays_and_the_next_run_tries_its_failing_seeds_first(
    pytester: pytest.Pytester,
) -> None:
    write_project(pytester.path, buggy=True)
    first = run(pytester, "--gpuemu", "-v", "--gpuemu-seed", "11")
    first.assert_outcomes(passed=1, failed=2)  # softmax at both dtypes overflows; scale is fine
    text = first.stdout.str()
    assert "gpuemu-ci: softmax failed" in text and "master seed 11" in text
    assert "replay: gpuemu-ci replay" in text and "Traceback" not in text
    cache = json.loads((pytester.path / ".pytest_cache/v/gpuemu/failing").read_text())
    assert set(cache) == {"softmax-float32", "softmax-float16"} and all(cache.values())

    # Another master seed would fuzz other cases; the remembered ones run first, and those tests first.
    second = run(pytester, "--gpuemu", "-v", "--gpuemu-seed", "12")
    order = [m.group(1) for m in re.finditer(r"gpuemu\.toml::(\S+) (?:PASSED|FAILED)", second.stdout.str())]
    assert order[:2] == ["softmax-float32", "softmax-float16"] and order[2] == "scale-float32"
    second.assert_outcomes(passed=1, failed=2)
    seeds = cache["softmax-float32"]
    assert any(f"--seed {seed}" in second.stdout.str() for seed in seeds)  # a remembered case failed again

    set_buggy(pytester.path, False)  # the fix
    fixed = run(pytester, "--gpuemu", "--gpuemu-seed", "12")
    fixed.assert_outcomes(passed=3)
    assert json.loads((pytester.path / ".pytest_cache/v/gpuemu/failing").read_text()) == {}


@pytest.mark.slow
def test_the_fixture_checks_a_callable_per_op_and_dtype_with_the_marker_narrowing(
    pytester: pytest.Pytester,
) -> None:
    write_project(pytester.path)
    pytester.makepyfile(
        test_project="""
        import numpy as np
        import pytest

        def my_softmax(x):  # correct
            e = np.exp(x.astype(np.float32) - x.astype(np.float32).max(axis=-1, keepdims=True))
            return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype)

        def my_wrong_softmax(x):  # forgets the normalisation of the last row
            out = my_softmax(x)
            out[-1] *= 1.01
            return out

        @pytest.mark.gpuemu("softmax")
        def test_mine(gpuemu_op):
            result = gpuemu_op.check(my_softmax)
            print(f"CASES {gpuemu_op.op} {gpuemu_op.dtype} {result.cases_total}")

        @pytest.mark.gpuemu("softmax", dtypes=["float32"])
        def test_wrong(gpuemu_op):
            gpuemu_op.check(my_wrong_softmax)

        def test_declared(gpuemu_op):
            gpuemu_op.check()
        """
    )
    result = run(pytester, "-v", "-s")
    result.assert_outcomes(passed=5, failed=1)
    text = result.stdout.str()
    for node in (
        "test_mine[softmax-float32]",
        "test_mine[softmax-float16]",
        "test_wrong[softmax-float32]",
        "test_declared[scale-float32]",
    ):
        assert node in text
    # The failing callable is defined in the test module; its replay runs that function, not the op's.
    assert re.search(r"replay: gpuemu-ci replay .*--target \S*test_project\.py:my_wrong_softmax", text)
    quick = {int(n) for n in re.findall(r"CASES softmax float32 (\d+)", text)}

    thorough = run(pytester, "-s", "-k", "test_mine and float32", "--gpuemu-suite", "thorough")
    thorough.assert_outcomes(passed=1)
    more = {int(n) for n in re.findall(r"CASES softmax float32 (\d+)", thorough.stdout.str())}
    assert max(more) > max(quick)  # the suite option reached the check


@pytest.mark.slow
def test_bad_input_is_a_usage_error_not_a_traceback(pytester: pytest.Pytester) -> None:
    write_project(pytester.path)
    missing = run(pytester, "--gpuemu", "--gpuemu-config", "nowhere/gpuemu.toml")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    assert "gpuemu: config file not found" in missing.stderr.str()

    (pytester.path / "gpuemu.toml").write_text("[project\nname = 1\n")
    broken = run(pytester, "--gpuemu")
    assert broken.ret == pytest.ExitCode.USAGE_ERROR and "gpuemu.toml" in broken.stderr.str()
    assert "Traceback" not in broken.stderr.str()

    write_project(pytester.path)
    pytester.makepyfile(
        test_x="""
        import pytest

        @pytest.mark.gpuemu("nope")
        def test_it(gpuemu_op):
            gpuemu_op.check()
        """
    )
    unknown = run(pytester)
    assert unknown.ret != pytest.ExitCode.OK
    assert "no op nope" in unknown.stdout.str() + unknown.stderr.str()


@pytest.mark.slow
def test_no_config_anywhere_is_a_usage_error(pytester: pytest.Pytester, tmp_path: Path) -> None:
    result = run(pytester, "--gpuemu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "no gpuemu.toml found" in result.stderr.str()


@pytest.mark.slow
def test_every_collected_op_is_checked_in_one_worker_pool(pytester: pytest.Pytester) -> None:
    """`pytest --gpuemu` shares one session and worker pool across its items, as `gpuemu-ci run` does, instead
    of starting (and importing into) a pool per item (issue #27: it was about 5x slower). Every case of every
    item runs in a worker of the same pool: the processes the one pool's zygote forked."""
    write_project(pytester.path)
    config = pytester.path / "gpuemu.toml"
    config.write_text(config.read_text().replace("case_timeout = 60", "case_timeout = 60\nparallel_jobs = 1"))
    ops = pytester.path / "ops.py"
    ops.write_text(
        ops.read_text()
        + textwrap.dedent(
            """
            import os

            _scale = scale

            def scale(x):
                with open(os.path.join(os.path.dirname(__file__), "pids.txt"), "a") as seen:
                    seen.write(f"{os.getppid()}\\n")
                return _scale(x)
            """
        )
    )
    config.write_text(
        config.read_text().replace('dtypes = ["float32"]\n', 'dtypes = ["float32", "float16"]\n')
    )
    outcome = run(pytester, "--gpuemu", "-k", "scale")
    outcome.assert_outcomes(passed=2)  # scale at float32 and at float16: two items
    parents = (pytester.path / "pids.txt").read_text().split()
    assert len(parents) >= 4 and len(set(parents)) == 1, parents
