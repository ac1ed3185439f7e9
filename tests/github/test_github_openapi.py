"""The fake API is held to GitHub's published OpenAPI description, and that check has teeth."""

from __future__ import annotations

import copy
import importlib.util
import json
from collections.abc import Callable
from types import ModuleType
from typing import Any

import jsonschema
import pytest

from gpuemu_ci.github.client import GitHubClient
from tests.github import support_fake_routes as fake_routes
from tests.github.support_fake_api import FakeGitHub
from tests.github.support_openapi import SPEC_PATH, OpenApiContract, contract

EXTRACT = SPEC_PATH.with_name("extract.py")


def load_extract() -> ModuleType:
    spec = importlib.util.spec_from_file_location("github_openapi_extract", EXTRACT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_vendored_subset_is_what_the_extractor_produces() -> None:
    # Re-extracting from the subset itself must give the subset back: every $ref it uses is
    # inside it, and nothing was added or edited by hand after extraction.
    extract = load_extract()
    vendored = json.loads(SPEC_PATH.read_text(encoding="utf-8"))
    again = extract.subset(copy.deepcopy(vendored))
    assert again["paths"] == vendored["paths"]
    assert again["components"] == vendored["components"]
    assert vendored["info"]["x-extracted-from"].startswith("npm @octokit/openapi@")


def test_the_fake_serves_exactly_the_extracted_operations() -> None:
    extract = load_extract()
    served = {
        ("/repos/{owner}/{repo}" + template, method.lower()) for method, _, template, _ in fake_routes.ROUTES
    }
    served |= {(t, m.lower()) for m, _, t, _ in fake_routes.ABSOLUTE_ROUTES if t != "graphql"}  # REST only
    assert served == set(extract.OPERATIONS)


def test_every_response_of_a_session_validates(fake_github: FakeGitHub, client: GitHubClient) -> None:
    run = fake_github.add_run(event="push", head_branch="main", head_sha="c" * 40)
    artifact = fake_github.add_artifact(run)
    pr = fake_github.add_pull(head_repository="forker/kernels")
    repo = f"/repos/{fake_github.repository}"
    list(client.paginate(f"{repo}/actions/runs", {"branch": "main"}, item_key="workflow_runs"))
    list(client.paginate(f"{repo}/actions/runs/{run['id']}/artifacts", item_key="artifacts"))
    pulls = list(client.paginate(f"{repo}/pulls", {"head": "forker:feature"}))
    assert [p["number"] for p in pulls] == [pr]
    client.request("GET", artifact["archive_download_url"], ok=(302,))
    assert {r.status for r in fake_github.responses} == {200, 302}
    spec = contract()
    for response in fake_github.responses:
        spec.validate(response.template, response.method, response.status, response.body, response.headers)


def test_a_response_missing_a_required_field_is_rejected(
    fake_github: FakeGitHub, client: GitHubClient
) -> None:
    run = fake_github.add_run(event="push", head_branch="main", head_sha="c" * 40)
    client.get_json(f"/repos/{fake_github.repository}/actions/runs/{run['id']}")
    (response,) = fake_github.responses
    broken = copy.deepcopy(response.body)
    del broken["head_repository"]["owner"]
    with pytest.raises(jsonschema.ValidationError, match="'owner' is a required property"):
        contract().validate(response.template, "GET", 200, broken)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda a: a.update(expired="no"), "is not of type 'boolean'"),
        (lambda a: a.update(size_in_bytes=None), "is not of type 'integer'"),
        (lambda a: a.pop("archive_download_url"), "is a required property"),
    ],
)
def test_artifact_shape_errors_are_caught(
    fake_github: FakeGitHub, mutate: Callable[[dict[str, Any]], object], message: str
) -> None:
    run = fake_github.add_run(event="push", head_branch="main", head_sha="c" * 40)
    artifact = copy.deepcopy(fake_github.add_artifact(run))
    body = {"total_count": 1, "artifacts": [artifact]}
    mutate(artifact)
    with pytest.raises(jsonschema.ValidationError, match=message):
        contract().validate("/repos/{owner}/{repo}/actions/artifacts", "GET", 200, body)


def test_nullable_fields_accept_null_and_undocumented_statuses_need_basic_error() -> None:
    spec = OpenApiContract()
    spec.validate("/repos/{owner}/{repo}/issues", "GET", 200, [])
    with pytest.raises(AssertionError, match="does not document status 201"):
        spec.validate("/repos/{owner}/{repo}/issues", "GET", 201, [])
    spec.validate("/repos/{owner}/{repo}/issues", "GET", 429, {"message": "slow down"})
    with pytest.raises(jsonschema.ValidationError):
        spec.validate("/repos/{owner}/{repo}/issues", "GET", 500, {"message": 5})


def test_subset_is_small() -> None:
    assert SPEC_PATH.stat().st_size < 200_000  # the published description is 13 MB
