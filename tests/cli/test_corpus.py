"""`gpuemu-ci corpus add results.json`: the failures a fuzzing run found are pinned, and every later run replays
them first, so a fixed bug stays fixed (issue #19, item 2). Real runs of the buggy example."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES
from tests.support_cli import CliResult

# Every test here takes seconds (whole runs, real processes): the fast tier (-m "not slow") leaves them out.
pytestmark = pytest.mark.slow


def test_failures_of_a_run_are_pinned_and_replayed_first_by_the_next_runs(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    project = tmp_path / "buggy"
    shutil.copytree(EXAMPLES / "buggy", project, ignore=shutil.ignore_patterns("gpuemu-out"))
    config = project / "gpuemu.toml"
    config.write_text(config.read_text().replace("[ci]\n", '[ci]\ncorpus = "gpuemu-corpus"\n', 1))
    first = cli(
        "run", "--config", config, "--out", tmp_path / "first", "--no-lint", "--op", "softmax", cwd=project
    )
    assert first.code == 1, first.output
    found = json.loads((tmp_path / "first" / "results.json").read_text())["ops"][0]["failures"]
    assert found and all(f["origin"] is None for f in found)

    pinned = cli("corpus", "add", "--config", config, tmp_path / "first" / "results.json", cwd=project)
    assert pinned.code == 0 and f"{len(found)} case(s) added" in pinned.stderr, pinned.output
    assert len(list((project / "gpuemu-corpus" / "softmax").glob("*.npz"))) == len(found)

    # Another seed fuzzes other cases; the pinned ones run first and fail again, named by their files.
    again = cli(
        "run", "--config", config, "--out", tmp_path / "again", "--no-lint", "--op", "softmax", "--seed", "99",
        cwd=project,
    )  # fmt: skip
    assert again.code == 1, again.output
    op = json.loads((tmp_path / "again" / "results.json").read_text())["ops"][0]
    pinned_failures = [f for f in op["failures"] if f["origin"]]
    assert len(pinned_failures) == len(found) == sum(row["cases_from_corpus"] for row in op["dtypes"])
    assert op["failures"][: len(found)] == pinned_failures  # listed first
    assert {f["dtype"] for f in pinned_failures} == {f["dtype"] for f in found}
    replayed = cli(*pinned_failures[0]["replay"].split()[1:], "--out", tmp_path / "replay", cwd=project)
    assert replayed.code == 1 and "REPRODUCED softmax" in replayed.stderr, replayed.output


def test_corpus_list_says_when_no_corpus_is_declared_or_none_is_pinned(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    project = tmp_path / "quickstart"
    shutil.copytree(EXAMPLES / "quickstart", project, ignore=shutil.ignore_patterns("gpuemu-out"))
    config = project / "gpuemu.toml"
    undeclared = cli("corpus", "list", "--config", config, cwd=project)
    assert undeclared.code == 2, undeclared.output
    assert "no regression corpus is declared" in undeclared.stderr and "[ci]" in undeclared.stderr
    assert undeclared.stdout == ""

    config.write_text(config.read_text().replace("[ci]\n", '[ci]\ncorpus = "gpuemu-corpus"\n', 1))
    empty = cli("corpus", "list", "--config", config, cwd=project)
    assert empty.code == 0, empty.output
    assert empty.stdout == "" and "no pinned case in" in empty.stderr and "gpuemu-corpus" in empty.stderr
