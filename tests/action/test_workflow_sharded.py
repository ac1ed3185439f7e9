"""The sharded PR gate (templates/workflows/gpuemu-pr-sharded.yml): a matrix of shard jobs and one job that
merges, comments once and uploads one report. Its shell steps are run here, as the runner would run them,
on a real project (the GitHub-only parts, the artifact transfer and the comment, stand aside)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.action.support_files import REPO, SHARDED_TEMPLATE, TEMPLATES, load_yaml, steps, triggers, uses
from tests.conftest import EXAMPLES

WORKFLOW = TEMPLATES / SHARDED_TEMPLATE


def _workflow() -> dict[str, Any]:
    return load_yaml(WORKFLOW)


def test_it_replaces_the_pr_gate_under_the_same_name_artifact_and_comment_key() -> None:
    sharded, single = _workflow(), load_yaml(TEMPLATES / "gpuemu-pr.yml")
    assert sharded["name"] == single["name"]  # gpuemu-fork-comment.yml follows runs of this name
    assert set(triggers(sharded)) == set(triggers(single)) == {"pull_request"}
    assert "gpuemu" in sharded["jobs"] and "gpuemu" in single["jobs"]  # the sticky comment's key
    uploads = [s["with"]["name"] for s in steps(sharded["jobs"]["gpuemu"]) if "upload-artifact" in uses(s)]
    assert uploads == ["gpuemu-results"]


def test_the_action_docs_show_the_template_as_it_is() -> None:
    import yaml

    blocks = re.findall(r"```yaml\n(.*?)```", (REPO / "docs" / "action.md").read_text(encoding="utf-8"), re.S)
    assert _workflow() in [yaml.safe_load(block) for block in blocks]


def test_the_matrix_alone_sets_the_number_of_shards_and_the_merge_waits_for_all() -> None:
    jobs = _workflow()["jobs"]
    shard, merge = jobs["shard"], jobs["gpuemu"]
    assert shard["strategy"]["matrix"]["shard"] == [1, 2, 3, 4] and shard["strategy"]["fail-fast"] is False
    (run,) = [s["run"] for s in steps(shard) if "gpuemu-ci run" in s.get("run", "")]
    assert "--shard" in run and "${{ matrix.shard }}/${{ strategy.job-total }}" in run
    assert merge["needs"] == "shard" and merge["if"] == "${{ !cancelled() }}"  # failing shards are merged too


def test_the_merge_job_runs_no_code_under_test() -> None:
    merge = _workflow()["jobs"]["gpuemu"]
    (checkout,) = [s for s in steps(merge) if uses(s).startswith("actions/checkout")]
    assert checkout["with"]["sparse-checkout"] == "gpuemu.toml"
    for step in steps(merge):
        for line in step.get("run", "").splitlines():
            words = line.strip().split()
            if words and words[0] == "gpuemu-ci":
                assert words[1] in ("merge", "render", "sign"), line  # never run, replay or calibrate


def _shell_steps(job: dict[str, Any], **values: str) -> list[str]:
    scripts = []
    for step in steps(job):
        script = step.get("run")
        if not script or "gh run" in script or "pip install" in script:
            continue  # GitHub's CLI and the installation: the runner's business
        for key, value in values.items():
            script = script.replace("${{ " + key + " }}", value)
        assert "${{" not in script, script
        scripts.append(script)
    return scripts


@pytest.mark.slow
def test_its_shell_steps_run_the_suite_in_shards_and_merge_it(tmp_path: Path) -> None:
    """What the jobs would do, in one directory: each shard, the shards' artifacts, then the merge job."""
    workspace = tmp_path / "workspace"
    shutil.copytree(EXAMPLES / "buggy", workspace)
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "gpuemu-ci").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gpuemu_ci "$@"\n')
    (shim / "gpuemu-ci").chmod(0o755)
    summary = tmp_path / "summary.md"
    env = {
        **os.environ,
        "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
        "GPUEMU_USER_CONFIG": "none",
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_REPOSITORY": "octo/kernels",
        "GITHUB_SHA": "b" * 40,
    }
    env.pop("GITHUB_ACTIONS", None)
    jobs = _workflow()["jobs"]
    total = len(jobs["shard"]["strategy"]["matrix"]["shard"])
    codes = []
    for k in range(1, total + 1):
        for script in _shell_steps(
            jobs["shard"], **{"matrix.shard": str(k), "strategy.job-total": str(total)}
        ):
            done = subprocess.run(
                ["bash", "-e", "-c", script], cwd=workspace, env=env, capture_output=True, text=True
            )
            assert done.returncode in (0, 1), done.stderr
            codes.append(done.returncode)
        # upload-artifact / download-artifact with `pattern: gpuemu-shard-*` and `path: shards`:
        shutil.copytree(workspace / "gpuemu-shard", workspace / "shards" / f"gpuemu-shard-{k}")
        shutil.rmtree(workspace / "gpuemu-shard")
    assert 1 in codes  # the buggy example's softmax fails in some shards...
    merge, *reports = _shell_steps(jobs["gpuemu"])
    done = subprocess.run(["bash", "-e", "-c", merge], cwd=workspace, env=env, capture_output=True, text=True)
    assert done.returncode == 1, done.stderr  # ...and the merged gate fails, once
    assert "FAILED" in done.stderr and "baseline" not in done.stderr.lower()
    for script in reports:
        done = subprocess.run(
            ["bash", "-e", "-c", script], cwd=workspace, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
    out = workspace / "gpuemu-out"
    assert {p.name for p in out.iterdir()} >= {
        "results.json",
        "results.sarif",
        "junit.xml",
        "report.dsse.json",
    }
    assert re.search(r"softmax", summary.read_text())
