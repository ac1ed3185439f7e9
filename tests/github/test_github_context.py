"""ActionContext.from_env with real webhook payloads (tests/fixtures/github-events)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gpuemu_ci.errors import ExitCode, UsageError
from gpuemu_ci.github.context import ActionContext, EventKind, read_inputs

EVENTS = Path(__file__).resolve().parents[1] / "fixtures" / "github-events"


def payload(name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((EVENTS / name).read_text(encoding="utf-8"))
    return result


def env_for(tmp_path: Path, event_name: str, event: dict[str, Any], **extra: str) -> dict[str, str]:
    path = tmp_path / "event.json"
    path.write_text(json.dumps(event), encoding="utf-8")
    repo = event.get("repository", {}).get("full_name", "Codertocat/Hello-World")
    env = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_REPOSITORY": repo,
        "GITHUB_EVENT_NAME": event_name,
        "GITHUB_EVENT_PATH": str(path),
        "GITHUB_SHA": "9" * 40,
        "GITHUB_REF": "refs/pull/2/merge",
        "GITHUB_RUN_ID": "1658821493",
        "GITHUB_RUN_ATTEMPT": "2",
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_API_URL": "https://api.github.com",
        "GITHUB_JOB": "gate",
        "INPUT_GITHUB_TOKEN": "ghs_secret_token_value",
    }
    env.update(extra)
    return env


def test_pull_request_from_the_same_repository(tmp_path: Path) -> None:
    event = payload("pull_request.synchronize.json")
    ctx = ActionContext.from_env(env_for(tmp_path, "pull_request", event))
    pr = event["pull_request"]
    assert ctx.event is EventKind.PULL_REQUEST and ctx.is_pull_request
    assert ctx.pr_number == event["number"]
    assert ctx.base_ref == pr["base"]["ref"] == "master"
    assert ctx.base_sha == pr["base"]["sha"]
    assert ctx.head_sha == pr["head"]["sha"]
    assert ctx.head_repository == "Codertocat/Hello-World"
    assert ctx.is_fork is False and ctx.token_is_read_only is False
    assert ctx.repository_id == event["repository"]["id"]
    assert ctx.default_branch == "master"
    assert ctx.run_id == 1658821493 and ctx.run_attempt == 2
    assert ctx.run_url == "https://github.com/Codertocat/Hello-World/actions/runs/1658821493"
    assert (ctx.owner, ctx.name) == ("Codertocat", "Hello-World")


def test_pull_request_from_a_fork(tmp_path: Path) -> None:
    event = payload("pull_request.synchronize.json")
    head_repo = event["pull_request"]["head"]["repo"]
    head_repo.update(full_name="forker/Hello-World", id=999, fork=True)
    ctx = ActionContext.from_env(env_for(tmp_path, "pull_request", event))
    assert ctx.is_fork is True
    assert ctx.token_is_read_only is True
    assert ctx.head_repository == "forker/Hello-World"


def test_pull_request_from_a_deleted_fork_counts_as_a_fork(tmp_path: Path) -> None:
    event = payload("pull_request.synchronize.json")
    event["pull_request"]["head"]["repo"] = None
    ctx = ActionContext.from_env(env_for(tmp_path, "pull_request", event))
    assert ctx.is_fork is True and ctx.head_repository is None


def test_push_compares_with_the_commit_before_the_push(tmp_path: Path) -> None:
    event = payload("push.branch.json")
    event["before"] = "1" * 40
    ctx = ActionContext.from_env(env_for(tmp_path, "push", event, GITHUB_REF="refs/heads/master"))
    assert ctx.event is EventKind.PUSH and not ctx.is_pull_request
    assert (ctx.base_ref, ctx.base_sha) == ("master", "1" * 40)
    assert ctx.head_sha == event["after"]
    assert ctx.pr_number is None and ctx.is_fork is False


def test_push_that_creates_a_branch_has_no_base_commit(tmp_path: Path) -> None:
    event = payload("push.branch.json")
    assert event["before"] == "0" * 40  # GitHub's "no previous commit"
    ctx = ActionContext.from_env(env_for(tmp_path, "push", event))
    assert ctx.base_ref == "master" and ctx.base_sha is None


def test_schedule_uses_the_branch_without_a_commit(tmp_path: Path) -> None:
    event = {"schedule": "17 3 * * *", "workflow": ".github/workflows/gpuemu-nightly.yml"}
    env = env_for(tmp_path, "schedule", event, GITHUB_REF="refs/heads/main", GITHUB_REF_NAME="main")
    ctx = ActionContext.from_env(env)
    assert ctx.event is EventKind.SCHEDULE
    assert (ctx.base_ref, ctx.base_sha, ctx.head_sha) == ("main", None, "9" * 40)


def test_workflow_run_with_a_same_repository_pull_request(tmp_path: Path) -> None:
    event = payload("workflow_run.completed.with_pr.json")
    ctx = ActionContext.from_env(env_for(tmp_path, "workflow_run", event))
    run = event["workflow_run"]
    assert ctx.event is EventKind.WORKFLOW_RUN
    assert ctx.triggering_run is not None
    assert ctx.triggering_run.id == run["id"]
    assert ctx.triggering_run.head_sha == run["head_sha"]
    assert ctx.triggering_run.pr_numbers == (run["pull_requests"][0]["number"],)
    assert ctx.pr_number == run["pull_requests"][0]["number"]
    assert ctx.base_sha == run["pull_requests"][0]["base"]["sha"]


def test_workflow_run_from_a_fork_has_no_pr_number_in_the_payload(tmp_path: Path) -> None:
    event = copy.deepcopy(payload("workflow_run.completed.with_pr.json"))
    run = event["workflow_run"]
    run["pull_requests"] = []  # what GitHub sends for fork PRs
    run["event"] = "pull_request"
    run["head_repository"]["full_name"] = "forker/octo-repo"
    ctx = ActionContext.from_env(env_for(tmp_path, "workflow_run", event))
    assert ctx.pr_number is None
    assert ctx.is_fork is True
    assert ctx.triggering_run is not None and ctx.triggering_run.head_repository == "forker/octo-repo"


def test_inputs_accept_both_spellings_and_underscore_wins(tmp_path: Path) -> None:
    env = env_for(
        tmp_path,
        "push",
        payload("push.branch.json"),
        **{"INPUT_FAIL-ON-REGRESSION": "false", "INPUT_OUTPUT-DIR": "out", "INPUT_OUTPUT_DIR": "gpuemu-out"},
    )
    ctx = ActionContext.from_env(env)
    assert ctx.input("fail_on_regression") == "false"
    assert ctx.input("fail-on-regression") == "false"
    assert ctx.input_bool("fail_on_regression", default=True) is False
    assert ctx.input("output_dir") == "gpuemu-out"
    assert read_inputs(env)["output_dir"] == "gpuemu-out"


def test_empty_inputs_count_as_not_given(tmp_path: Path) -> None:
    env = env_for(tmp_path, "push", payload("push.branch.json"), INPUT_SEED="  ", INPUT_COMMENT="")
    ctx = ActionContext.from_env(env)
    assert ctx.input("seed", "default") == "default"
    assert ctx.input_bool("comment", default=True) is True


def test_a_bad_boolean_input_is_a_usage_error(tmp_path: Path) -> None:
    env = env_for(tmp_path, "push", payload("push.branch.json"), INPUT_COMMENT="yes")
    ctx = ActionContext.from_env(env)
    with pytest.raises(UsageError, match="'comment' must be true or false, got 'yes'"):
        ctx.input_bool("comment", default=True)


def test_token_comes_from_the_input_and_stays_out_of_repr(tmp_path: Path) -> None:
    env = env_for(tmp_path, "push", payload("push.branch.json"), INPUT_SIGNING_KEY="-----BEGIN secret")
    ctx = ActionContext.from_env(env)
    assert ctx.token == "ghs_secret_token_value"
    text = repr(ctx)
    assert "ghs_secret_token_value" not in text
    assert "BEGIN secret" not in text
    assert "Codertocat/Hello-World" in text


def test_token_falls_back_to_github_token(tmp_path: Path) -> None:
    env = env_for(tmp_path, "push", payload("push.branch.json"), GITHUB_TOKEN="ghs_from_env")
    del env["INPUT_GITHUB_TOKEN"]
    assert ActionContext.from_env(env).token == "ghs_from_env"


def test_defaults_outside_github_enterprise(tmp_path: Path) -> None:
    env = env_for(tmp_path, "push", payload("push.branch.json"))
    del env["GITHUB_SERVER_URL"], env["GITHUB_API_URL"]
    ctx = ActionContext.from_env(env)
    assert (ctx.server_url, ctx.api_url) == ("https://github.com", "https://api.github.com")


def test_missing_repository_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="GITHUB_REPOSITORY is not set") as info:
        ActionContext.from_env({})
    assert info.value.exit_code is ExitCode.USAGE


@pytest.mark.parametrize("repository", ["justone", "a/b/c", "/b"])
def test_malformed_repository_is_a_usage_error(repository: str) -> None:
    with pytest.raises(UsageError, match="owner/name"):
        ActionContext.from_env({"GITHUB_REPOSITORY": repository})


def test_unreadable_or_bad_event_payloads_are_usage_errors(tmp_path: Path) -> None:
    base = {"GITHUB_REPOSITORY": "o/r", "GITHUB_EVENT_NAME": "push"}
    with pytest.raises(UsageError, match="cannot read the event payload"):
        ActionContext.from_env({**base, "GITHUB_EVENT_PATH": str(tmp_path / "missing.json")})
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(UsageError, match="not valid JSON"):
        ActionContext.from_env({**base, "GITHUB_EVENT_PATH": str(tmp_path / "bad.json")})
    (tmp_path / "list.json").write_text("[]", encoding="utf-8")
    with pytest.raises(UsageError, match="not a JSON object"):
        ActionContext.from_env({**base, "GITHUB_EVENT_PATH": str(tmp_path / "list.json")})


def test_unknown_events_and_odd_payload_types_do_not_crash(tmp_path: Path) -> None:
    event = {"pull_request": {"number": "7", "base": ["not", "a", "dict"], "head": None}}
    ctx = ActionContext.from_env(env_for(tmp_path, "pull_request", event))
    assert ctx.pr_number == 7 and ctx.base_sha is None and ctx.is_fork is True
    other = ActionContext.from_env(env_for(tmp_path, "merge_group", {}))
    assert other.event is EventKind.OTHER and other.event_name == "merge_group"
