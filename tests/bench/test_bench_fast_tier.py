"""bench/bench_fast_tier.py, the CI check of the fast tier's time: it runs the tier between runs of the reference
workload, prints both and their ratio, and fails when the ratio is over the budget or a test of the tier failed.
Run as CI runs it (a subprocess), on one small test module so that the tier itself is short."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "bench_fast_tier.py"
SMALL_TIER = ["tests/test_skip_groups.py"]


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(SCRIPT), "--reference-runs", "1", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
def test_a_tier_over_its_budget_fails_and_prints_the_figures() -> None:
    done = bench("--budget", "0.001", "--", *SMALL_TIER)
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(r"reference runs: [\d.]+, [\d.]+ s", done.stdout), done.stdout
    assert re.search(r"fast tier: [\d.]+ s wall, [\d.]+ s CPU \(pytest exit 0\)", done.stdout), done.stdout
    ratios = re.search(
        r"ratio fast tier / reference: wall ([\d.]+), CPU ([\d.]+) \(budget 0.00 each\)", done.stdout
    )
    assert ratios is not None and float(ratios.group(1)) > 0.001 and float(ratios.group(2)) > 0.001, (
        done.stdout
    )
    assert (
        "wall time is" in done.stderr
        and "CPU time is" in done.stderr
        and "over its budget of 0.00" in done.stderr
    )


@pytest.mark.slow
def test_a_failing_tier_fails_whatever_its_time() -> None:
    done = bench("--budget", "1000", "--", "tests/test_no_such_module.py")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the fast tier did not pass" in done.stderr
