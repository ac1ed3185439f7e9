"""A case that crashed is said as a crash in the baseline diff, not as a numeric regression with a "+0%"
headroom change; a headroom that grew from zero or many times over reads as "new nonzero" or "×N", not as
">+999999%" (issue #27). Real runs of the quickstart's gelu: one that passes, one whose worker dies."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpuemu_ci.diff.ops import change
from tests.diff.support_diff import QUICKSTART, entry, gpuemu, load


@pytest.mark.slow
def test_a_crashing_case_is_reported_as_crashed_in_the_baseline_diff(tmp_path: Path) -> None:
    small = ("--op", "gelu", "--dtype", "float32", "--iterations", "4", "--no-lint")
    good = tmp_path / "good"
    shutil.copytree(QUICKSTART, good, ignore=shutil.ignore_patterns("__pycache__", "gpuemu-out"))
    base = gpuemu("run", "--config", good / "gpuemu.toml", *small, "--out", tmp_path / "base", cwd=tmp_path)
    assert base.returncode == 0, base.stderr

    crashing = tmp_path / "crashing"
    shutil.copytree(good, crashing)
    kernel = crashing / "kernels" / "gelu.py"
    text = kernel.read_text()
    head = "    flat = x.reshape(-1)\n"
    assert head in text, "the quickstart gelu changed"
    # The worker dies on some cases (odd sizes); the others pass, so the row keeps a worst headroom.
    kernel.write_text(text.replace(head, "    import os\n\n    if x.size % 2:\n        os.abort()\n" + head))
    run = gpuemu(
        "run", "--config", crashing / "gpuemu.toml", *small, "--out", tmp_path / "now",
        "--baseline", tmp_path / "base" / "results.json", cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 1, run.stderr
    results = load(tmp_path / "now" / "results.json")
    assert {f["kind"] for f in results["ops"][0]["failures"]} == {"crashed"}
    (row_now,) = results["ops"][0]["dtypes"]
    assert 0 < row_now["cases_failed"] < row_now["cases_total"] and row_now["worst_headroom"] is not None
    row = entry(results["diff"], "gelu", "float32")
    assert row["classification"] == "regressed"
    (status,) = [r for r in row["reasons"] if r["metric"] == "status"]
    assert status["message"].startswith("passed -> failed: ") and status["message"].endswith("cases crashed")
    assert not [r for r in row["reasons"] if r["metric"] == "worst_headroom"], row["reasons"]
    assert "+0%" not in run.stderr + run.stdout


def test_large_headroom_changes_read_as_a_factor_or_new_nonzero() -> None:
    assert change(0.0, 0.3, 30.0) == "new nonzero"
    assert change(0.001, 0.5, (0.5 - 0.001) / 0.01) == "×500"
    assert change(0.2, 0.27, 0.35) == "+35%"
    assert change(0.5, 0.25, -0.5) == "-50%"
    assert "999999" not in change(1e-9, 1e6, 1e8)
