"""The workflow templates users copy and this project's CI: actionlint-clean, minimal token
permissions, and the security rules of the fork and signing set-ups."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuemu_ci.github.artifacts import BASELINE_EVENTS
from tests.action.support_files import (
    ACTION_DOC,
    ACTION_YML,
    ACTIONLINT_MISSING,
    ALL_TEMPLATE_NAMES,
    PROJECT_WORKFLOWS,
    README,
    REPO,
    TEMPLATES,
    action_name,
    load_yaml,
    steps,
    tool_or_skip,
    triggers,
    uses,
)

# The token each job gets, and no more.
EXPECTED_PERMISSIONS = {
    ("gpuemu-pr.yml", "gpuemu"): {"contents": "read", "pull-requests": "write", "actions": "read"},
    ("gpuemu-baseline.yml", "baseline"): {"contents": "read"},
    ("gpuemu-baseline.yml", "sign"): {},
    ("gpuemu-nightly.yml", "nightly"): {"contents": "read", "issues": "write"},
    ("gpuemu-fork-comment.yml", "comment"): {"actions": "read", "pull-requests": "write"},
    ("gpuemu-pr-sharded.yml", "shard"): {"contents": "read"},
    ("gpuemu-pr-sharded.yml", "gpuemu"): {"contents": "read", "pull-requests": "write", "actions": "read"},
}
OUR_ACTION = "gpuemu/action"


def _template(name: str) -> dict[str, Any]:
    return load_yaml(TEMPLATES / name)


def _action_steps(workflow: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (job_id, step)
        for job_id, job in workflow["jobs"].items()
        for step in steps(job)
        if action_name(uses(step)) in (OUR_ACTION, ".", "./")
    ]


def test_the_templates_exist() -> None:
    assert sorted(p.name for p in TEMPLATES.glob("*.yml")) == sorted(ALL_TEMPLATE_NAMES)


# --- actionlint ------------------------------------------------------------------------------


def _actionlint(files: list[Path], cwd: Path) -> subprocess.CompletedProcess[str]:
    binary = tool_or_skip("actionlint", ACTIONLINT_MISSING)
    return subprocess.run(
        [binary, "-no-color", "-oneline", *map(str, files)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_actionlint_passes_on_ci_and_templates() -> None:
    """Run from the repository root, so `uses: ./` in ci.yml is checked against action.yml."""
    files = sorted(PROJECT_WORKFLOWS.glob("*.yml")) + sorted(TEMPLATES.glob("*.yml"))
    assert any(f.parent == PROJECT_WORKFLOWS for f in files), ".github/workflows has no workflow"
    result = _actionlint(files, REPO)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_catches_a_wrong_input_of_the_local_action(tmp_path: Path) -> None:
    """The check above means something: a misspelt input of `uses: ./` fails it."""
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    (tmp_path / "action.yml").write_text(ACTION_YML.read_text(encoding="utf-8"))
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.write_text(
        "on: push\npermissions: {}\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - uses: ./\n        with:\n          output-dir: out\n"
    )
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, capture_output=True)
    result = _actionlint([bad], tmp_path)
    assert result.returncode == 1
    assert "output-dir" in result.stdout


def test_actionlint_passes_on_the_workflows_in_the_docs(tmp_path: Path) -> None:
    text = ACTION_DOC.read_text(encoding="utf-8") + README.read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    workflows = [b for b in blocks if re.search(r"^jobs:", b, re.M)]
    assert workflows, "docs/action.md and README.md have no complete workflow example"
    files = []
    for index, text in enumerate(workflows):
        path = tmp_path / f"doc-{index}.yml"
        path.write_text(text)
        files.append(path)
    result = _actionlint(files, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


# --- permissions -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL_TEMPLATE_NAMES)
def test_templates_grant_nothing_by_default_and_each_job_only_what_it_needs(name: str) -> None:
    workflow = _template(name)
    assert workflow.get("permissions") == {}, f"{name}: set top-level `permissions: {{}}`"
    for job_id, job in workflow["jobs"].items():
        expected = EXPECTED_PERMISSIONS.get((name, job_id))
        assert expected is not None, f"{name}: job {job_id} has no expected permissions in this test"
        assert job.get("permissions") == expected, f"{name}/{job_id}"


def test_project_ci_only_reads() -> None:
    workflow = load_yaml(PROJECT_WORKFLOWS / "ci.yml")
    assert workflow.get("permissions") == {}
    for job_id, job in workflow["jobs"].items():
        assert job.get("permissions") == {"contents": "read"}, job_id


def test_project_ci_runs_the_promised_checks() -> None:
    text = (PROJECT_WORKFLOWS / "ci.yml").read_text(encoding="utf-8")
    workflow = load_yaml(PROJECT_WORKFLOWS / "ci.yml")
    # Every supported Python, from pyproject's requires-python (3.11) to the newest.
    assert workflow["jobs"]["test"]["strategy"]["matrix"]["python"] == ["3.11", "3.12", "3.13"]
    (run,) = [s["run"] for s in steps(workflow["jobs"]["test"]) if "run" in s]
    assert run.strip() == ".ci/run"
    script = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    for command in ('python3}" -m venv', "--require-hashes -r requirements/dev.lock", "readme_commands",
                    "ruff check .", "ruff format --check .", "mypy", ".ci/image-contents",
                    ".ci/hashseed-check", "[ -x .ci/container ]"):  # fmt: skip
        assert command in script, command
    for command in ("actionlint", "hadolint Dockerfile"):
        assert command in text, command
    assert "templates/workflows/*.yml" in text, "actionlint must cover the templates"


def test_the_drift_workflow_tests_the_newest_dependencies_on_a_schedule() -> None:
    workflow = load_yaml(PROJECT_WORKFLOWS / "drift.yml")
    assert "schedule" in triggers(workflow)
    text = (PROJECT_WORKFLOWS / "drift.yml").read_text(encoding="utf-8")
    assert "dev.lock" not in text.split("\nname:", 1)[1]  # the lock is what it must not use
    assert "--upgrade --upgrade-strategy eager" in text and "pytest" in text


def test_a_version_tag_publishes_to_pypi_by_trusted_publishing() -> None:
    workflow = load_yaml(PROJECT_WORKFLOWS / "release.yml")
    assert list(triggers(workflow)) == ["push"] and triggers(workflow)["push"]["tags"]
    assert workflow["permissions"] == {}
    jobs = workflow["jobs"]
    (publisher,) = [j for j in jobs.values() if any(action_name(uses(s)) == "pypa/gh-action-pypi-publish"
                                                   for s in steps(j))]  # fmt: skip
    # No token: the OIDC identity, granted to that job alone.
    assert publisher["permissions"] == {"id-token": "write"}
    assert publisher["environment"]["name"] == "pypi"
    assert all("id-token" not in (j.get("permissions") or {}) for j in jobs.values() if j is not publisher)
    assert not any("password" in (s.get("with") or {}) for s in steps(publisher))


# --- security rules --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL_TEMPLATE_NAMES)
def test_no_template_uses_pull_request_target(name: str) -> None:
    assert "pull_request_target" not in triggers(_template(name))


def test_fork_comment_workflow_never_checks_out_or_runs_code() -> None:
    workflow = _template("gpuemu-fork-comment.yml")
    assert set(triggers(workflow)) == {"workflow_run"}
    for job_id, job in workflow["jobs"].items():
        for step in steps(job):
            assert action_name(uses(step)) != "actions/checkout", f"{job_id} checks out code"
            assert "run" not in step, f"{job_id} runs a shell step: {step.get('run')!r}"
        assert "container" not in job and "services" not in job


def test_fork_comment_workflow_follows_the_pr_gate_and_reads_its_artifact() -> None:
    pr = _template("gpuemu-pr.yml")
    fork = _template("gpuemu-fork-comment.yml")
    run_trigger = triggers(fork)["workflow_run"]
    assert run_trigger["workflows"] == [pr["name"]]
    assert run_trigger["types"] == ["completed"]
    uploads = [s["with"]["name"] for s in steps(pr["jobs"]["gpuemu"]) if "upload-artifact" in uses(s)]
    (job,) = fork["jobs"].values()
    downloads = [s for s in steps(job) if "download-artifact" in uses(s)]
    assert len(downloads) == 1
    download = downloads[0]["with"]
    assert download["name"] in uploads
    assert download["run-id"] == "${{ github.event.workflow_run.id }}"
    # Only pull requests from forks: same-repository pull requests get their comment from the gate job.
    condition = job["if"]
    assert "github.event.workflow_run.event == 'pull_request'" in condition
    assert "head_repository.full_name != github.repository" in condition


def test_fork_comment_uses_the_gate_jobs_comment_key() -> None:
    """Otherwise a pull request could end up with two gpuemu-ci comments."""
    pr_job_ids = list(_template("gpuemu-pr.yml")["jobs"])
    ((_, step),) = _action_steps(_template("gpuemu-fork-comment.yml"))
    assert step["with"]["mode"] == "comment"
    assert step["with"]["job_key"] in pr_job_ids


def test_signing_key_only_reaches_a_job_that_runs_no_code_under_test() -> None:
    workflow = _template("gpuemu-baseline.yml")
    holders = [j for j, job in workflow["jobs"].items() if "secrets.GPUEMU_SIGNING_KEY" in str(job)]
    assert holders == ["sign"]
    sign = workflow["jobs"]["sign"]
    assert sign["needs"] == "baseline"
    for step in steps(sign):
        assert action_name(uses(step)) != "actions/checkout"
        assert "secrets." not in str(step.get("run", "")), "the key must not reach a shell step"
    ((job_id, step),) = [(j, s) for j, s in _action_steps(workflow) if s["with"]["mode"] == "sign"]
    assert job_id == "sign"
    assert step["with"]["signing_key"] == "${{ secrets.GPUEMU_SIGNING_KEY }}"


def test_checkouts_do_not_keep_the_token_in_git_config() -> None:
    for path in [*TEMPLATES.glob("*.yml"), PROJECT_WORKFLOWS / "ci.yml"]:
        for job_id, job in load_yaml(path)["jobs"].items():
            for step in steps(job):
                if action_name(uses(step)) == "actions/checkout":
                    assert (step.get("with") or {}).get("persist-credentials") is False, (
                        f"{path.name}/{job_id}"
                    )


# --- the action's contract -------------------------------------------------------------------


def test_action_steps_pass_only_declared_inputs_with_valid_values() -> None:
    inputs = load_yaml(ACTION_YML)["inputs"]
    modes = {"gate", "baseline", "nightly", "sign", "comment"}
    seen_modes = set()
    for path in [*TEMPLATES.glob("*.yml"), PROJECT_WORKFLOWS / "ci.yml"]:
        for job_id, step in _action_steps(load_yaml(path)):
            given = step.get("with") or {}
            unknown = set(given) - set(inputs)
            assert not unknown, f"{path.name}/{job_id}: unknown inputs {sorted(unknown)}"
            assert given.get("mode", "gate") in modes
            assert given.get("suite", "quick") in ("quick", "thorough")
            assert str(given.get("comment", "true")) in ("true", "false")
            seen_modes.add(given.get("mode", "gate"))
    assert seen_modes == modes, "every mode appears in a template"


@pytest.mark.parametrize(
    ("name", "job_id", "artifact"),
    [("gpuemu-pr.yml", "gpuemu", "gpuemu-results"), ("gpuemu-baseline.yml", "baseline", "gpuemu-baseline"),
     ("gpuemu-nightly.yml", "nightly", "gpuemu-nightly")],
)  # fmt: skip
def test_results_are_uploaded_from_the_actions_output_dir(name: str, job_id: str, artifact: str) -> None:
    job = _template(name)["jobs"][job_id]
    default_out = load_yaml(ACTION_YML)["inputs"]["output_dir"]["default"]
    ours = [s for s in steps(job) if action_name(uses(s)) == OUR_ACTION]
    out = (ours[0].get("with") or {}).get("output_dir", default_out)
    (upload,) = [s for s in steps(job) if "upload-artifact" in uses(s)]
    assert upload["with"]["name"] == artifact
    assert upload["with"]["path"].rstrip("/") == out.rstrip("/")
    assert isinstance(upload["with"].get("retention-days"), int)
    if name != "gpuemu-baseline.yml":
        # Snapshots of failures matter most when the gate failed: upload then too.
        assert upload.get("if") in ("${{ !cancelled() }}", "${{ always() }}", "always()", "!cancelled()")


def test_baseline_runs_where_the_gate_looks_for_it() -> None:
    """The gate searches artifacts of these events only: a baseline from any other run is never used."""
    on = triggers(_template("gpuemu-baseline.yml"))
    assert set(on) == set(BASELINE_EVENTS)
    ((_, step), *_) = _action_steps(_template("gpuemu-baseline.yml"))
    assert step["with"]["mode"] == "baseline"


def test_nightly_runs_the_thorough_suite_on_a_schedule_with_a_fresh_seed() -> None:
    workflow = _template("gpuemu-nightly.yml")
    assert "schedule" in triggers(workflow)
    ((_, step),) = _action_steps(workflow)
    assert step["with"]["mode"] == "nightly"
    assert step["with"]["suite"] == "thorough"
    assert "seed" not in step["with"], "a fixed seed would fuzz the same cases every night"


@pytest.mark.parametrize("name", ["gpuemu-pr.yml", "gpuemu-baseline.yml", "gpuemu-nightly.yml"])
def test_gate_templates_keep_tritons_compile_cache_keyed_on_triton_and_the_kernels(name: str) -> None:
    from gpuemu_ci.action.inputs import DEFAULT_CACHE_DIR
    from gpuemu_ci.action.setup_step import TRITON_CACHE_NAME

    workflow = _template(name)
    for job_id, step in _action_steps(workflow):
        if step.get("with", {}).get("mode") == "sign":
            continue
        job = steps(workflow["jobs"][job_id])
        cached = [s for s in job if action_name(uses(s)) == "actions/cache"]
        # restored before the gate runs, where the Action points TRITON_CACHE_DIR
        assert cached and job.index(cached[0]) < job.index(step), (name, job_id)
        options = cached[0]["with"]
        assert options["path"] == f"{DEFAULT_CACHE_DIR}/{TRITON_CACHE_NAME}"
        assert "requirements*.txt" in options["key"] and "**/*.py" in options["key"]
        assert options["key"].startswith(options["restore-keys"].strip())
