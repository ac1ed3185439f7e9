"""Numeric regressions between real runs of the quickstart: a matmul that accumulates in fp16 (fails), one
that is slightly less accurate (passes, headroom grows), and the baseline that both are compared with."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.diff.support_diff import (
    QUICKSTART,
    diff_cli,
    dtype_result,
    entry,
    gpuemu,
    load,
    reason,
    save,
    valid_results,
)

pytestmark = pytest.mark.slow

FP16_ACCUMULATOR = (
    ("acc = np.zeros((m, n), dtype=np.float32)", "acc = np.zeros((m, n), dtype=np.float16)"),
    ("acc += a_tile @ b_tile", "acc += (a_tile @ b_tile).astype(np.float16)"),
)
# A relative error of 1.5e-7 on every output: still inside the fp32 error bound, but closer to it.
NUDGED = (("return acc.astype(a.dtype)", "return (acc * np.float32(1 + 1.5e-7)).astype(a.dtype)"),)


@dataclass(frozen=True)
class Runs:
    root: Path
    base: Path  # matmul, float32 + bfloat16: passes
    broken: Path  # fp16 accumulator, run with --baseline base: fails
    broken_stderr: str
    broken_exit: int
    nudged: Path  # matmul + gelu, float32 only: passes, matmul headroom grew


def _project(root: Path, name: str, edits: tuple[tuple[str, str], ...]) -> Path:
    project = root / name
    shutil.copytree(QUICKSTART, project, ignore=shutil.ignore_patterns("__pycache__", "gpuemu-out"))
    matmul = project / "kernels" / "matmul.py"
    text = matmul.read_text()
    for old, new in edits:
        assert old in text, f"the quickstart matmul changed: {old!r} not found"
        text = text.replace(old, new)
    matmul.write_text(text)
    return project


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    root = tmp_path_factory.mktemp("numerics")
    small = ("--op", "matmul", "--iterations", "4")
    good = _project(root, "good", ())
    done = gpuemu("run", "--config", good / "gpuemu.toml", *small, "--out", root / "base", cwd=root)
    assert done.returncode == 0, done.stderr
    broken = _project(root, "broken", FP16_ACCUMULATOR)
    failing = gpuemu(
        "run",
        "--config",
        broken / "gpuemu.toml",
        *small,
        "--out",
        root / "broken-out",
        "--baseline",
        root / "base" / "results.json",
        cwd=root,
    )
    nudged = _project(root, "nudged", NUDGED)
    done = gpuemu(
        "run",
        "--config",
        nudged / "gpuemu.toml",
        *small,
        "--op",
        "gelu",
        "--dtype",
        "float32",
        "--out",
        root / "nudged-out",
        cwd=root,
    )
    assert done.returncode == 0, done.stderr
    return Runs(
        root,
        root / "base" / "results.json",
        root / "broken-out" / "results.json",
        failing.stderr,
        failing.returncode,
        root / "nudged-out" / "results.json",
    )


def _diff(runs: Runs, baseline: Path, current: Path, *extra: str) -> tuple[int, dict, str]:
    return diff_cli(baseline, current, *extra)


def test_fp16_accumulation_is_a_failing_regression_with_old_and_new_values(runs: Runs) -> None:
    code, diff, stderr = _diff(runs, runs.base, runs.broken)
    assert code == 1
    base, now = load(runs.base), load(runs.broken)
    e = entry(diff, "matmul", "float32")
    assert (e["classification"], e["severity"]) == ("regressed", "error")
    status = reason(e, "status")
    assert (status["old"], status["new"]) == ("passed", "failed")
    headroom = reason(e, "worst_headroom")
    assert headroom["old"] == dtype_result(base, "matmul", "float32")["worst_headroom"]
    assert headroom["new"] == dtype_result(now, "matmul", "float32")["worst_headroom"] > 1
    assert diff["regressions"] >= 1 and diff["fail_on_regression"] is True and diff["gate_failed"] is True
    assert "FAIL" in stderr and "matmul [float32]" in stderr and "passed -> failed" in stderr


def test_run_with_baseline_puts_the_same_diff_into_results_json(runs: Runs) -> None:
    assert runs.broken_exit == 1
    document = load(runs.broken)
    assert document["diff"]["status"] == "compared" and document["verdict"] == "failed"
    _, diff, _ = _diff(runs, runs.base, runs.broken)
    assert document["diff"]["entries"] == diff["entries"]
    assert document["diff"]["summary_line"] in runs.broken_stderr
    valid_results(document)


def test_no_fail_on_regression_reports_but_exits_0(runs: Runs) -> None:
    code, diff, stderr = _diff(runs, runs.base, runs.broken, "--no-fail-on-regression")
    assert code == 0 and "FAILED" not in stderr
    assert diff["regressions"] >= 1 and diff["gate_failed"] is False
    assert "fail_on_regression is off" in diff["summary_line"]


def test_policy_from_the_config_decides_when_no_flag_is_given(runs: Runs) -> None:
    config = runs.root / "good" / "policy.toml"
    config.write_text((QUICKSTART / "gpuemu.toml").read_text() + "\n[policies]\nfail_on_regression = false\n")
    assert _diff(runs, runs.base, runs.broken, "--config", str(config))[0] == 0
    assert _diff(runs, runs.base, runs.broken, "--config", str(config), "--fail-on-regression")[0] == 1


def test_fixing_the_kernel_is_an_improvement(runs: Runs) -> None:
    code, diff, _ = _diff(runs, runs.broken, runs.base)
    assert code == 0
    e = entry(diff, "matmul", "float32")
    assert (e["classification"], e["severity"]) == ("improved", "info")
    assert diff["regressions"] == 0


def test_headroom_growth_past_its_threshold_warns_without_failing(runs: Runs) -> None:
    code, diff, stderr = _diff(runs, runs.base, runs.nudged)
    assert code == 0
    e = entry(diff, "matmul", "float32")
    assert (e["classification"], e["severity"]) == ("regressed", "warning")
    headroom = reason(e, "worst_headroom")
    assert headroom["new"] > headroom["old"] * 1.1 and headroom["new"] <= 1
    assert "headroom_growth_threshold" in headroom["message"]
    assert diff["warnings"] >= 1 and diff["regressions"] == 0 and "WARN" in stderr


def test_headroom_growth_threshold_comes_from_the_config(runs: Runs) -> None:
    growth = _growth(runs)
    config = runs.root / "good" / "lenient.toml"
    config.write_text(
        (QUICKSTART / "gpuemu.toml").read_text()
        + f"\n[policies]\nheadroom_growth_threshold = {growth + 0.5}\n"
    )
    _, diff, _ = _diff(runs, runs.base, runs.nudged, "--config", str(config))
    assert entry(diff, "matmul", "float32")["classification"] == "unchanged"


def _growth(runs: Runs) -> float:
    old = dtype_result(load(runs.base), "matmul", "float32")["worst_headroom"]
    new = dtype_result(load(runs.nudged), "matmul", "float32")["worst_headroom"]
    result: float = (new - old) / old
    return result


def test_new_and_removed_ops_and_dtypes_are_listed(runs: Runs) -> None:
    _, diff, stderr = _diff(runs, runs.base, runs.nudged)
    gelu = entry(diff, "gelu", "float32")
    assert gelu["classification"] == "new"
    removed = entry(diff, "matmul", "bfloat16")  # the baseline ran it; this run had --dtype float32
    assert (removed["classification"], removed["severity"]) == ("removed", "warning")
    assert "gelu [float32]" in stderr and "matmul [bfloat16]" in stderr
    _, reverse, _ = _diff(runs, runs.nudged, runs.base)
    assert entry(reverse, "gelu", "float32")["classification"] == "removed"
    assert entry(reverse, "matmul", "bfloat16")["classification"] == "new"


def test_a_generator_version_change_is_shown_and_not_a_regression(runs: Runs) -> None:
    baseline = load(runs.base)
    baseline["generator_version"] = "1"
    path = save(runs.root / "old-generator.json", baseline)
    code, diff, _ = _diff(runs, path, runs.broken)
    assert code == 0
    e = entry(diff, "matmul", "float32")
    assert (e["classification"], e["severity"]) == ("toolchain_changed", "info")
    assert reason(e, "generator_version")["old"] == "1"
    assert any(n["metric"] == "generator_version" for n in diff["notes"])


def test_a_comparator_change_is_shown_and_not_a_regression(runs: Runs) -> None:
    baseline = load(runs.base)
    for d in baseline["ops"][0]["dtypes"]:
        d["comparator"] = "allclose"
    code, diff, _ = _diff(runs, save(runs.root / "allclose.json", baseline), runs.broken)
    assert code == 0
    e = entry(diff, "matmul", "bfloat16")
    assert e["classification"] == "toolchain_changed"
    assert (reason(e, "comparator")["old"], reason(e, "comparator")["new"]) == ("allclose", "bound")


def test_a_different_seed_does_not_warn_about_headroom(runs: Runs) -> None:
    baseline = load(runs.base)
    baseline["seed"] = baseline["seed"] + 1
    _, diff, _ = _diff(runs, save(runs.root / "other-seed.json", baseline), runs.nudged)
    e = entry(diff, "matmul", "float32")
    assert (e["classification"], e["severity"]) == ("unchanged", "info")
    assert "cases differ" in reason(e, "cases")["message"]
    assert any(n["metric"] == "seed" for n in diff["notes"])


def test_a_changed_config_is_reported(runs: Runs) -> None:
    baseline = load(runs.base)
    baseline["config"]["sha256"] = "0" * 64
    _, diff, _ = _diff(runs, save(runs.root / "other-config.json", baseline), runs.base)
    note = next(n for n in diff["notes"] if n["metric"] == "config_sha256")
    assert note["old"] == "0" * 64 and note["new"] == load(runs.base)["config"]["sha256"]
    assert "gpuemu.toml changed" in diff["message"]
