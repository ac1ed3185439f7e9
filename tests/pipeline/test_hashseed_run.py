"""A whole run is a function of its seed: the gate run twice on the quickstart under two PYTHONHASHSEED values
writes the same results document, timings aside (.ci/hashseed-check, which CI runs)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import EXAMPLES, REPO


@pytest.mark.slow
def test_two_hash_seeds_give_the_same_results_document() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / ".ci" / "hashseed-check"), str(EXAMPLES / "quickstart" / "gpuemu.toml")],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    said = re.search(r"the same results under PYTHONHASHSEED 0 and 1 \((\d+) cases\)", done.stdout)
    assert said is not None and int(said.group(1)) > 6 * 16, done.stdout  # every op's cases, not a few
