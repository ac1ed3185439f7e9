"""`gpuemu-ci baseline create`, `gpuemu-ci diff` input handling, and `run --baseline` with a baseline that
is missing or broken: a clear message, the right exit code, the run's own verdict kept."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuemu_ci.config.model import Policies
from gpuemu_ci.diff.baseline import BaselineSource, diff_against
from gpuemu_ci.pipeline.gate import with_diff
from gpuemu_ci.results.codec import from_json, to_builtins
from tests.diff.support_diff import diff_cli, dtype_result, gpuemu, load, save, valid_diff
from tests.support_cli import run_cli
from tests.support_tiers import runs_a_gate


def apply_baseline(document: dict, baseline: Path, policies: Policies) -> dict:
    """`run --baseline` on an already finished run: its document with the diff attached and the verdict decided."""
    results = from_json(json.dumps(document))
    return to_builtins(with_diff(results, diff_against(BaselineSource(baseline), results, policies, True)))


CONFIG = """
[project]
name = "scale"

[validation]
dtypes = ["float32", "float16"]
seed = 7

[ci]
quick_iterations = 4
quick_dtypes = ["float32", "float16"]

[[ops]]
name = "scale"
op = "myops:scale"
reference = "myops:scale_ref"
family = "elementwise"
[ops.dims]
N = { min = 1, max = 64, typical = [16, 32] }
[ops.inputs]
x = ["N"]
"""

OPS = """
import numpy as np

def scale(x):
    return (x.astype(np.float32) * np.float32(2)).astype(x.dtype)

def scale_ref(x):
    return x * 2.0
"""


@dataclass(frozen=True)
class Project:
    root: Path
    results: Path
    commit: str


@pytest.fixture(scope="module")
@runs_a_gate
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    root = tmp_path_factory.mktemp("scale")
    (root / "gpuemu.toml").write_text(CONFIG)
    (root / "myops.py").write_text(OPS)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
    for args in (["init", "-q"], ["add", "gpuemu.toml", "myops.py"], ["commit", "-q", "-m", "base"]):
        subprocess.run([*git, *args], cwd=root, check=True, capture_output=True)
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=root, check=True, capture_output=True, text=True
    ).stdout.strip()
    done = gpuemu("run", "--out", "base", cwd=root)
    assert done.returncode == 0, done.stderr
    return Project(root, root / "base" / "results.json", commit)


def _create(*args: str | Path) -> tuple[int, str, str]:
    result = run_cli(["baseline", "create", *args])
    return result.code, result.stdout, result.stderr


@pytest.mark.slow
def test_create_keeps_what_a_diff_needs_and_drops_the_rest(project: Project) -> None:
    out = project.root / "baseline.json"
    code, _, stderr = _create("--from", project.results, "-o", out)
    assert code == 0, stderr
    baseline, results = load(out), load(project.results)
    assert baseline["schema_version"] == results["schema_version"]
    assert baseline["git"]["commit"] == project.commit and project.commit[:12] in stderr
    assert baseline["config"]["sha256"] == results["config"]["sha256"]
    assert baseline["seed"] == results["seed"] == 7
    assert baseline["generator_version"] == results["generator_version"]
    assert baseline["tool"]["version"] == results["tool"]["version"]
    for dtype in ("float32", "float16"):
        kept = next(d for d in baseline["ops"][0]["dtypes"] if d["dtype"] == dtype)
        ran = dtype_result(results, "scale", dtype)
        assert (kept["status"], kept["worst_headroom"], kept["cases_total"]) == (
            ran["status"],
            ran["worst_headroom"],
            ran["cases_total"],
        )
    assert baseline["ops"][0]["failures"] == [] and baseline["ops"][0]["failures_omitted"] == 0
    assert "2 op x dtype results" in stderr


@pytest.mark.slow
def test_a_baseline_file_and_its_results_json_diff_the_same(project: Project) -> None:
    out = project.root / "same.json"
    assert _create("--from", project.results, "-o", out)[0] == 0
    code, from_baseline, _ = diff_cli(out, project.results)
    _, from_results, _ = diff_cli(project.results, project.results)
    assert code == 0
    assert from_baseline["entries"] == from_results["entries"]
    assert {e["classification"] for e in from_baseline["entries"]} == {"unchanged"}
    assert from_baseline["summary_line"].startswith("no regressions")
    assert from_baseline["baseline"]["path"] == str(out) and from_results["baseline"]["path"] == str(
        project.results
    )
    assert from_baseline["baseline"]["commit"] == project.commit


@pytest.mark.slow
def test_create_to_stdout(project: Project) -> None:
    code, stdout, _ = _create("--from", project.results, "-o", "-")
    assert code == 0 and json.loads(stdout)["schema_version"] == load(project.results)["schema_version"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "not found"),
        ("{not json", "not JSON"),
        (
            '{"schema_version": "99", "ops": []}',
            "has results schema version '99'; this gpuemu-ci reads version 2",
        ),
        ("[1, 2]", "Expected `object`, got `array` - at `$`"),
    ],
)
def test_create_rejects_bad_input_with_exit_2(tmp_path: Path, content: str | None, message: str) -> None:
    source = tmp_path / "results.json"
    if content is not None:
        source.write_text(content)
    code, stdout, stderr = _create("--from", source, "-o", tmp_path / "out.json")
    assert code == 2 and message in stderr and stdout == ""
    assert not (tmp_path / "out.json").exists()


def _newer_baseline(project: Project, tmp_path: Path) -> Path:
    out = tmp_path / "newer.json"
    assert _create("--from", project.results, "-o", out)[0] == 0
    return save(out, dict(load(out), schema_version="9"))


@pytest.mark.parametrize("case", ["missing", "corrupt", "newer", "bad_field", "infinite", "missing_current"])
def test_diff_exits_2_on_input_it_cannot_read(project: Project, tmp_path: Path, case: str) -> None:
    baseline, current = tmp_path / "missing.json", project.results
    expected = "does not exist"
    if case == "corrupt":
        baseline.write_text('{"schema_version": "2", "ops": [')
        expected = "not JSON"
    elif case == "newer":
        baseline, expected = _newer_baseline(project, tmp_path), "schema version '9'"
    elif case == "bad_field":
        document = load(project.results)
        document["ops"][0]["dtypes"][1]["worst_headroom"] = "high"
        baseline, expected = save(tmp_path / "typo.json", document), "$.ops[0].dtypes[1].worst_headroom"
    elif case == "infinite":  # Python's json writes Infinity without allow_nan=False
        document = load(project.results)
        document["ops"][0]["dtypes"][0]["worst_headroom"] = float("inf")
        baseline, expected = save(tmp_path / "inf.json", document), "not JSON"
    elif case == "missing_current":
        baseline, current, expected = project.results, tmp_path / "nope.json", "current results"
    code, diff, stderr = diff_cli(baseline, current)
    assert code == 2 and diff == {}
    assert expected in stderr and "Traceback" not in stderr


def test_diff_with_a_broken_config_exits_2(project: Project, tmp_path: Path) -> None:
    config = tmp_path / "gpuemu.toml"
    config.write_text("[policies]\nwarn_threshold = 'high'\n")
    code, _, stderr = diff_cli(project.results, project.results, "--config", config)
    assert code == 2 and "warn_threshold" in stderr


@pytest.mark.slow
def test_run_without_a_baseline_file_falls_back_to_its_own_verdict_and_says_why(project: Project) -> None:
    done = gpuemu("run", "--out", "out-missing", "--baseline", "missing.json", cwd=project.root)
    assert done.returncode == 0, done.stderr
    document = load(project.root / "out-missing" / "results.json")
    assert document["verdict"] == "passed" and document["exit_code"] == 0
    diff = document["diff"]
    assert diff["status"] == "no_baseline" and diff["entries"] == [] and diff["regressions"] == 0
    assert "No regression check was done" in diff["message"] and "missing.json" in diff["message"]
    assert "gpuemu-ci baseline create" in diff["message"]
    assert diff["message"] in done.stderr  # said plainly on the terminal too, never silently "no regressions"
    valid_diff(diff)


@pytest.mark.parametrize("content", ["\x00 definitely not json", '{"schema_version": "2"}', '"a string"'])
def test_a_corrupt_baseline_is_reported_as_unreadable(project: Project, tmp_path: Path, content: str) -> None:
    path = tmp_path / "corrupt.json"
    path.write_text(content)
    out = apply_baseline(load(project.results), path, Policies())
    assert (out["verdict"], out["exit_code"]) == ("passed", 0)
    diff = out["diff"]
    assert diff["status"] == "unreadable" and diff["entries"] == [] and str(path) in diff["message"]
    assert diff["summary_line"].startswith("baseline unreadable") and "No regression check" in diff["message"]
    valid_diff(diff)


def test_apply_baseline_keeps_a_failing_verdict_when_the_baseline_is_missing(
    project: Project, tmp_path: Path
) -> None:
    document = load(project.results)
    document["ops"][0]["status"] = "failed"  # as a run with a failing op records it
    out = apply_baseline(document, tmp_path / "none.json", Policies())
    assert (out["verdict"], out["exit_code"], out["diff"]["status"]) == ("failed", 1, "no_baseline")


def test_an_unusable_current_document_is_named_not_a_crash(project: Project, tmp_path: Path) -> None:
    document = load(project.results)
    document["ops"][0]["dtypes"] = "oops"
    code, diff, stderr = diff_cli(project.results, save(tmp_path / "current.json", document))
    assert code == 2 and diff == {} and "$.ops[0].dtypes" in stderr


def test_the_diff_section_matches_its_schema(project: Project) -> None:
    _, diff, _ = diff_cli(project.results, project.results)
    valid_diff(diff)
    document = apply_baseline(load(project.results), project.results, Policies())
    valid_diff(document["diff"])
    json.dumps(document, allow_nan=False)  # results.json is written without NaN/Infinity


def test_headroom_changes_at_noise_level_do_not_warn(project: Project, tmp_path: Path) -> None:
    baseline, current = load(project.results), load(project.results)
    dtype_result(baseline, "scale", "float32")["worst_headroom"] = 0.0
    dtype_result(current, "scale", "float32")["worst_headroom"] = 0.0005  # 0.05% of the error bound
    dtype_result(current, "scale", "float16")["worst_headroom"] = (
        dtype_result(baseline, "scale", "float16")["worst_headroom"] * 3 + 0.05
    )
    _, diff, _ = diff_cli(save(tmp_path / "b.json", baseline), save(tmp_path / "c.json", current))
    by_dtype = {e["variant"]: e for e in diff["entries"]}
    assert by_dtype["float32"]["classification"] == "unchanged"
    assert by_dtype["float16"]["severity"] == "warning"
