"""The Action's entrypoint as the runner runs it: `python entrypoint.py` in a separate process, configured
only by the environment a Docker action gets, against the fake GitHub API on 127.0.0.1.

Each test checks what a user of the Action sees: the exit code (the gate's), the step outputs, the
annotations, the files in output_dir, and what ended up on GitHub (comments, issues), and every response
the fake sent is validated against GitHub's OpenAPI description at teardown.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuemu_ci.attest import keys
from tests.action.support_runner import (
    BUGGY_SCALE,
    TINY_CONFIG,
    Step,
    many_failures_project,
    pull_request_event,
    push_event,
    run_step,
    runner_env,
    schedule_event,
    workflow_run_event,
    write_tiny_project,
)
from tests.github.support_fake_api import Failure, FakeGitHub

# Each test runs whole suites or processes: seconds each (the fast tier, -m "not slow", leaves them out).
pytestmark = pytest.mark.slow


def sha(label: str) -> str:
    """A commit id, distinct per label."""
    return hashlib.sha1(label.encode()).hexdigest()


HEAD, BASE, MERGE = sha("pr head"), sha("main at the PR's base"), sha("merge commit")
COMMENT_LIMIT = 60_000
# The `with:` blocks of the workflow templates (gpuemu_ci/templates/workflows) that these steps stand for.
PR_TEMPLATE = {"mode": "gate", "config": "gpuemu.toml", "suite": "quick", "baseline": "auto"}
BASELINE_TEMPLATE = {"mode": "baseline", "config": "gpuemu.toml", "suite": "quick"}
NIGHTLY_TEMPLATE = {
    "mode": "nightly", "config": "gpuemu.toml", "suite": "thorough", "baseline": "none", "allow_skips": "true",
}  # fmt: skip
SIGN_TEMPLATE = {"mode": "sign", "results": "gpuemu-out/results.json"}
FORK_COMMENT_TEMPLATE = {"mode": "comment", "results": "gpuemu-out/results.json", "job_key": "gpuemu"}


def gate_env(
    fake_github: FakeGitHub,
    workspace: Path,
    pr: int,
    *,
    inputs: dict[str, str] | None = None,
    head_repository: str | None = None,
    run_id: int = 9001,
) -> dict[str, str]:
    """The PR template's gate step on pull request ``pr`` (from ``head_repository`` if a fork's)."""
    event = pull_request_event(fake_github, pr, head_sha=HEAD, base_sha=BASE, head_repository=head_repository)
    return runner_env(
        fake_github, workspace, "pull_request", event, sha=MERGE, ref=f"refs/pull/{pr}/merge",
        inputs={**PR_TEMPLATE, **(inputs or {})}, run_id=run_id,
    )  # fmt: skip


def baseline_env(
    fake_github: FakeGitHub, workspace: Path, *, inputs: dict[str, str] | None = None, job: str = "gpuemu"
) -> dict[str, str]:
    """A step of a run on the push to main that made commit BASE."""
    event = push_event(fake_github, before=sha("main before"), after=BASE)
    return runner_env(
        fake_github, workspace, "push", event, sha=BASE, ref="refs/heads/main", inputs=inputs, job=job
    )


def ok(step: Step, code: int = 0) -> Step:
    assert step.returncode == code, step.describe()
    assert "Traceback" not in step.stderr and "internal error" not in step.stdout, step.describe()
    return step


def op_block_lines(config: str, op: str) -> range:
    """The lines (1-based) of the [[ops]] table named ``op`` in ``config``."""
    lines = config.splitlines()
    name_line = lines.index(f'name = "{op}"')
    start = max(i for i in range(name_line) if lines[i] == "[[ops]]")
    end = next((i for i in range(name_line, len(lines)) if lines[i] == "[[ops]]"), len(lines))
    return range(start + 1, end + 1)


def comment_writes(fake_github: FakeGitHub) -> list[str]:
    return [
        r.method for r in fake_github.api_calls(path_regex=r"/issues/(\d+/)?comments") if r.method != "GET"
    ]


def envelope(step: Step) -> dict[str, object]:
    result: dict[str, object] = json.loads(
        (step.workspace / step.outputs["report_path"]).read_text(encoding="utf-8")
    )
    return result


def verify(report: Path, public_key: Path, repo: str, commit: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "gpuemu_ci.cli.main", "verify", "--key", str(public_key)]
    command += ["--repo", repo, "--commit", commit, str(report)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


# --- 1. first run, second run, another job -----------------------------------------------------------


def test_first_run_says_no_baseline_and_later_runs_update_the_same_comment(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    pr = fake_github.add_pull(head_sha=HEAD, base_sha=BASE)
    workspace = write_tiny_project(tmp_path / "ws")

    first = ok(run_step(gate_env(fake_github, workspace, pr, run_id=101)))
    assert first.outputs["verdict"] == "passed"
    assert (first.outputs["ops_passed"], first.outputs["ops_failed"], first.outputs["regressions"]) == (
        "2", "0", "0",
    )  # fmt: skip
    diff = first.results()["diff"]
    assert diff["status"] == "no_baseline" and diff["regressions"] == 0
    assert "no baseline" in diff["message"] and "baseline workflow" in diff["message"]
    (comment,) = fake_github.comments(pr)
    assert first.outputs["comment_url"] == comment["html_url"]
    assert comment["body"].startswith("<!-- gpuemu-ci:v1 key=gpuemu -->")
    assert "no baseline" in comment["body"].lower() and "actions/runs/101" in comment["body"]
    assert "no baseline" in first.summary.lower()
    assert {p.name for p in (workspace / "gpuemu-out").iterdir()} >= {
        "results.json", "report.dsse.json", "results.sarif", "junit.xml",
    }  # fmt: skip
    assert first.outputs["results_path"] == "gpuemu-out/results.json"
    assert first.outputs["report_path"] == "gpuemu-out/report.dsse.json"

    second = ok(run_step(gate_env(fake_github, workspace, pr, run_id=102)))
    (updated,) = fake_github.comments(pr)
    assert updated["id"] == comment["id"] and second.outputs["comment_url"] == comment["html_url"]
    assert "actions/runs/102" in updated["body"] and "actions/runs/101" not in updated["body"]
    assert comment_writes(fake_github) == ["POST", "PATCH"]

    ok(run_step(gate_env(fake_github, workspace, pr, run_id=103, inputs={"job_key": "gpuemu-sm90"})))
    first_job, other_job = fake_github.comments(pr)
    assert first_job["id"] == comment["id"] and "actions/runs/102" in first_job["body"]
    assert other_job["body"].startswith("<!-- gpuemu-ci:v1 key=gpuemu-sm90 -->")
    assert comment_writes(fake_github) == ["POST", "PATCH", "POST"]


# --- 2. baseline produced on main, found and diffed on the PR --------------------------------------------


def test_baseline_from_main_is_found_by_base_commit_and_a_regression_fails_the_gate(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    main = write_tiny_project(tmp_path / "main")
    produced = ok(run_step(baseline_env(fake_github, main, inputs=BASELINE_TEMPLATE)))
    assert produced.outputs["verdict"] == "passed"
    files = {name: (main / "gpuemu-out" / name).read_bytes() for name in ("baseline.json", "results.json")}
    assert json.loads(files["results.json"])["run"]["commit"] == BASE
    assert fake_github.requests == []  # the baseline job's token has no scopes; it needs none

    # The baseline workflow uploads output_dir as `gpuemu-baseline`. Newer decoys must lose: a fork's run
    # on its own `main`, and a push at another commit.
    run = fake_github.add_run(event="push", head_branch="main", head_sha=BASE)
    fake_github.add_artifact(run, "gpuemu-baseline", files)
    junk = {"baseline.json": b"{}", "results.json": b"{}"}
    fork_run = fake_github.add_run(
        event="push", head_branch="main", head_sha=BASE, head_repository="forker/kernels"
    )
    fake_github.add_artifact(fork_run, "gpuemu-baseline", junk)
    fake_github.add_artifact(
        fake_github.add_run(event="push", head_branch="main", head_sha=sha("later")), files=junk
    )

    pr = fake_github.add_pull(head_sha=HEAD, base_sha=BASE)
    head = write_tiny_project(tmp_path / "pr")
    clean = ok(run_step(gate_env(fake_github, head, pr)))
    diff = clean.results()["diff"]
    assert diff["status"] == "compared", diff["message"]
    provenance = diff["baseline"]["provenance"]
    assert (provenance["match"], provenance["run_id"], provenance["commit"]) == ("exact", run["id"], BASE)
    assert clean.outputs["regressions"] == "0"

    write_tiny_project(head, BUGGY_SCALE)
    regressed = ok(run_step(gate_env(fake_github, head, pr)), 1)
    assert regressed.outputs["verdict"] == "failed"
    assert int(regressed.outputs["regressions"]) >= 1 and regressed.outputs["ops_failed"] == "1"
    assert regressed.results()["diff"]["baseline"]["provenance"]["match"] == "exact"
    errors = [c for c in regressed.commands if c.name == "error"]
    scale = next(c for c in errors if "scale" in c.props.get("title", ""))
    assert scale.props["file"] == "gpuemu.toml" and int(scale.props["line"]) in op_block_lines(
        TINY_CONFIG, "scale"
    )
    assert "gpuemu-ci replay" in scale.message
    (comment,) = fake_github.comments(pr)
    assert "scale" in comment["body"] and "regress" in comment["body"].lower()
    assert "gpuemu-ci replay" in comment["body"]


# --- 3. a comment that would be too large -------------------------------------------------------------


def test_a_huge_failing_suite_posts_a_truncated_comment_under_the_limit(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    pr = fake_github.add_pull(head_sha=HEAD, base_sha=BASE)
    workspace = many_failures_project(tmp_path / "ws", ops=80)
    step = ok(run_step(gate_env(fake_github, workspace, pr, inputs={"baseline": "none"})), 1)
    assert step.outputs["ops_failed"] == "80"
    (comment,) = fake_github.comments(pr)
    assert len(comment["body"].encode("utf-8")) <= COMMENT_LIMIT
    assert step.outputs["comment_url"] == comment["html_url"]
    body = comment["body"]
    assert "Shortened to fit GitHub's size limit" in body and "Left out:" in body
    assert "broken_op_000" in body  # the first failures are still there
    # Nothing is lost: results.json and the step summary have every op.
    assert len(step.results()["ops"]) == 80
    assert "broken_op_079" in step.summary and len(step.summary.encode()) > COMMENT_LIMIT
    # GitHub shows 10 error annotations per step; the rest are counted, not dropped silently.
    assert len(step.messages("error")) <= 10
    assert any("70 more annotation(s) not shown" in m for m in step.messages("notice"))


# --- 4. fork pull request, then the workflow_run companion ---------------------------------------------


def test_fork_pr_writes_results_without_commenting_and_the_companion_comments(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    pr = fake_github.add_pull(
        head_ref="feature", head_sha=HEAD, base_sha=BASE, head_repository="forker/kernels"
    )
    run = fake_github.add_run(
        event="pull_request", head_branch="feature", head_sha=HEAD, head_repository="forker/kernels"
    )
    fake_github.read_only = True  # GitHub caps a fork PR's token at read
    workspace = write_tiny_project(tmp_path / "ws", BUGGY_SCALE)
    env = gate_env(fake_github, workspace, pr, head_repository="forker/kernels", run_id=run["id"])
    step = ok(run_step(env), 1)
    assert step.outputs["verdict"] == "failed"
    assert comment_writes(fake_github) == [] and fake_github.comments(pr) == []
    assert any("fork" in m and "workflow" in m for m in step.messages("notice")), step.describe()
    assert not any("comment" in m.lower() for m in step.messages("warning"))
    assert step.out("results.json").is_file()
    report = envelope(step)
    assert report["signatures"] == []
    assert step.outputs["comment_url"] == ""

    # The fork's run uploaded output_dir; the companion (workflow_run, write token) downloaded it.
    fake_github.read_only = False
    companion = tmp_path / "companion"
    (companion / "gpuemu-out").mkdir(parents=True)
    (companion / "gpuemu-out" / "results.json").write_bytes(step.out("results.json").read_bytes())
    event = workflow_run_event(fake_github, run)  # pull_requests is empty for forks
    env = runner_env(fake_github, companion, "workflow_run", event, sha=BASE, ref="refs/heads/main", run_id=777,
                     job="comment", inputs=FORK_COMMENT_TEMPLATE)  # fmt: skip
    posted = ok(run_step(env))
    (comment,) = fake_github.comments(pr)
    assert posted.outputs["comment_url"] == comment["html_url"]
    assert "scale" in comment["body"] and "gpuemu-ci replay" in comment["body"]
    # The links point at the fork's run, which holds the results and snapshots, not the companion's.
    assert f"actions/runs/{run['id']}" in comment["body"] and "actions/runs/777" not in comment["body"]

    # An artifact that describes another commit (stale, or swapped by the fork's workflow) is not commented.
    document = json.loads(step.out("results.json").read_text())
    document["run"]["commit"] = BASE
    (companion / "gpuemu-out" / "results.json").write_text(json.dumps(document))
    refused = ok(run_step(env), 3)
    (error,) = refused.messages("error")
    assert BASE in error and HEAD in error and "no comment posted" in error
    assert (
        fake_github.comments(pr) == [comment] and refused.outputs.get("comment_url", "") == ""
    )  # left as it was


# --- 5. permission errors and throttling ---------------------------------------------------------------


@pytest.mark.parametrize("failure", ["read_only", "server_keeps_failing"])
def test_a_comment_that_cannot_be_posted_is_a_warning_and_the_gate_decides(
    fake_github: FakeGitHub, tmp_path: Path, failure: str
) -> None:
    pr = fake_github.add_pull(head_sha=HEAD, base_sha=BASE)
    if failure == "read_only":  # e.g. `permissions: contents: read` only
        fake_github.read_only = True
    else:
        fake_github.fail("POST", r"/issues/\d+/comments$", Failure.server_error(502), times=10)
    workspace = write_tiny_project(tmp_path / "ws", BUGGY_SCALE)
    step = ok(run_step(gate_env(fake_github, workspace, pr, inputs={"baseline": "none"})), 1)
    assert step.outputs["verdict"] == "failed" and step.outputs["comment_url"] == ""
    (warning,) = [m for m in step.messages("warning") if "comment" in m.lower()]
    if failure == "read_only":
        assert "pull-requests: write" in warning
    assert fake_github.comments(pr) == []
    assert step.out("results.json").is_file() and step.out("report.dsse.json").is_file()


def test_rate_limits_and_server_errors_are_retried_and_leave_one_comment(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    pr = fake_github.add_pull(head_sha=HEAD, base_sha=BASE)
    fake_github.fail("GET", r"/actions/artifacts$", Failure.server_error(503))
    fake_github.fail("GET", r"/issues/\d+/comments$", Failure.too_many_requests(retry_after=1))
    # The create lands but the answer is a 502: a blind resend would post a second comment.
    fake_github.fail("POST", r"/issues/\d+/comments$", Failure.applied_then_server_error(502))
    fake_github.fail("PATCH", r"/issues/comments/\d+$", Failure.secondary_rate_limit(retry_after=1))
    workspace = write_tiny_project(tmp_path / "ws")
    step = ok(run_step(gate_env(fake_github, workspace, pr)))
    (comment,) = fake_github.comments(pr)
    assert step.outputs["comment_url"] == comment["html_url"]
    assert "passed" in comment["body"]
    assert not [m for m in step.messages("warning") if "comment" in m.lower()], step.describe()
    assert step.results()["diff"]["status"] == "no_baseline"  # the artifact list was retried, not skipped
    assert len(fake_github.api_calls("GET", r"/actions/artifacts$")) == 2
    assert len(fake_github.api_calls("PATCH", r"/issues/comments/\d+$")) == 2


# --- 6. expired baseline ----------------------------------------------------------------------------------


@pytest.mark.parametrize("when", ["listed_as_expired", "expired_before_download"])
def test_an_expired_baseline_is_neutral(fake_github: FakeGitHub, tmp_path: Path, when: str) -> None:
    run = fake_github.add_run(event="push", head_branch="main", head_sha=BASE)
    files = {"baseline.json": b"{}"}
    fake_github.add_artifact(run, "gpuemu-baseline", files, expired=when == "listed_as_expired")
    if when == "expired_before_download":
        fake_github.fail("GET", r"/actions/artifacts/\d+/zip$", Failure.gone())
    pr = fake_github.add_pull(head_sha=HEAD, base_sha=BASE)
    workspace = write_tiny_project(tmp_path / "ws")
    step = ok(run_step(gate_env(fake_github, workspace, pr)))
    diff = step.results()["diff"]
    assert diff["status"] == "no_baseline" and "expired" in diff["message"]
    assert step.outputs["regressions"] == "0" and step.outputs["verdict"] == "passed"
    (comment,) = fake_github.comments(pr)
    assert "expired" in comment["body"]
    assert not step.messages("error")


def test_a_forbidden_baseline_lookup_is_a_warning_and_the_gate_still_decides(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    """A job without `actions: read` cannot list artifacts: say so, and gate on the run's own verdicts."""
    fake_github.fail("GET", r"/actions/artifacts$", Failure.read_only())
    pr = fake_github.add_pull(head_sha=HEAD, base_sha=BASE)
    workspace = write_tiny_project(tmp_path / "ws", BUGGY_SCALE)
    step = ok(run_step(gate_env(fake_github, workspace, pr)), 1)
    (warning,) = [m for m in step.messages("warning") if m.startswith("baseline")]
    assert "Resource not accessible by integration" in warning and "actions: read" in warning
    assert step.results()["diff"]["status"] == "no_baseline"
    (comment,) = fake_github.comments(pr)
    assert "Resource not accessible by integration" in comment["body"]


# --- 7. nightly issues ----------------------------------------------------------------------------------


def test_nightly_opens_one_issue_per_failing_op_updates_it_and_closes_it_when_fixed(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    workspace = write_tiny_project(tmp_path / "ws", BUGGY_SCALE)

    def nightly(run_id: int) -> Step:
        env = runner_env(fake_github, workspace, "schedule", schedule_event(), sha=BASE, ref="refs/heads/main",
                         run_id=run_id, inputs=NIGHTLY_TEMPLATE)  # fmt: skip
        return run_step(env)

    first = ok(nightly(201), 1)
    (issue,) = fake_github.issues()
    assert issue["state"] == "open" and "scale" in issue["title"]
    assert [label["name"] for label in issue["labels"]] == ["gpuemu-nightly"]
    seed = first.results()["seed"]
    assert str(seed) in issue["body"] and "gpuemu-ci replay" in issue["body"]
    assert "actions/runs/201" in issue["body"]

    second = ok(nightly(202), 1)
    assert second.results()["seed"] != seed  # a fresh master seed each night, recorded
    (same,) = fake_github.issues()
    assert same["number"] == issue["number"] and "actions/runs/202" in same["body"]
    assert str(second.results()["seed"]) in same["body"]

    write_tiny_project(workspace)
    ok(nightly(203))
    (closed,) = fake_github.issues()
    assert closed["number"] == issue["number"]
    assert (closed["state"], closed["state_reason"]) == ("closed", "completed")
    assert any("passes again" in c["body"] for c in fake_github.comments(issue["number"]))


# --- 8. signing ---------------------------------------------------------------------------------------


def test_sign_mode_signs_what_verify_accepts_and_gate_without_a_key_is_unsigned(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    workspace = write_tiny_project(tmp_path / "ws")
    gate = ok(run_step(baseline_env(fake_github, workspace, inputs=PR_TEMPLATE)))
    public = tmp_path / "signing.pub"
    key = keys.generate()
    public.write_bytes(key.public.pem())
    unsigned = verify(gate.workspace / gate.outputs["report_path"], public, fake_github.repository, BASE)
    assert unsigned.returncode == 1 and "unsigned" in (unsigned.stdout + unsigned.stderr)

    # The sign job checks nothing out: it downloads the results and signs them, away from the code under test.
    signer = tmp_path / "sign-job"
    (signer / "gpuemu-out").mkdir(parents=True)
    (signer / "gpuemu-out" / "results.json").write_bytes(gate.out("results.json").read_bytes())
    inputs = {**SIGN_TEMPLATE, "signing_key": key.private_pem().decode()}
    signed = ok(run_step(baseline_env(fake_github, signer, inputs=inputs, job="sign")))
    assert signed.outputs["report_path"] == "gpuemu-out/report.dsse.json"
    report = signed.workspace / signed.outputs["report_path"]
    accepted = verify(report, public, fake_github.repository, BASE)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert verify(report, public, fake_github.repository, sha("another commit")).returncode == 2
    # The key is masked before anything could print it, and never printed otherwise.
    assert signed.stdout.startswith("::add-mask::")
    masked = "\n".join(line for line in signed.stdout.splitlines() if not line.startswith("::add-mask::"))
    assert "PRIVATE KEY" not in masked + signed.stderr


# --- 9. bad input ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("inputs", "says"),
    [
        ({"mode": "weekly"}, "mode"),
        ({"seed": "abc"}, "seed"),
        ({"suite": "fast"}, "suite"),
        ({"comment": "yes please"}, "comment"),
        ({"config": "missing/gpuemu.toml"}, "gpuemu.toml"),
    ],
)
def test_bad_input_exits_2_with_an_error_annotation(
    fake_github: FakeGitHub, tmp_path: Path, inputs: dict[str, str], says: str
) -> None:
    workspace = write_tiny_project(tmp_path / "ws")
    step = ok(run_step(baseline_env(fake_github, workspace, inputs=inputs)), 2)
    (error,) = step.messages("error")
    assert says in error
    assert not (workspace / "gpuemu-out" / "results.json").exists()


def test_a_workspace_without_gpuemu_toml_exits_2(fake_github: FakeGitHub, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    step = ok(run_step(baseline_env(fake_github, workspace)), 2)
    (error,) = step.messages("error")
    assert "gpuemu.toml" in error


# --- 10. ownership of output_dir -------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown needs root")
def test_output_dir_is_handed_to_the_workspace_owner(fake_github: FakeGitHub, tmp_path: Path) -> None:
    """A Docker action runs as root; the runner's later steps run as the workspace's owner."""
    workspace = write_tiny_project(tmp_path / "ws")
    os.chown(workspace, 4321, 4321)
    inputs = {**BASELINE_TEMPLATE, "output_dir": "out/gpuemu"}
    ok(run_step(baseline_env(fake_github, workspace, inputs=inputs)))
    made = [workspace / "out", *(workspace / "out").rglob("*")]
    assert {p.name for p in made} >= {"baseline.json", "results.json", "report.dsse.json"}
    assert {(p.stat().st_uid, p.stat().st_gid) for p in made} == {(4321, 4321)}
