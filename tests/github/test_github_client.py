"""GitHubClient against the fake API on 127.0.0.1: headers, pagination, GitHub's retry rules."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest

from gpuemu_ci.errors import ExitCode, GpuemuError, UsageError
from gpuemu_ci.github.client import (
    API_VERSION,
    GitHubAuthError,
    GitHubClient,
    GitHubDownloadTooLargeError,
    GitHubError,
    GitHubForbiddenError,
    GitHubGoneError,
    GitHubNetworkError,
    GitHubRateLimitError,
    GitHubServerError,
)
from tests.github.support_fake_api import Failure, FakeGitHub, SleepRecorder

NOW = 1_700_000_000.0


def comments_path(fake: FakeGitHub, number: int) -> str:
    return f"/repos/{fake.repository}/issues/{number}/comments"


def test_every_request_carries_version_accept_and_bearer_token(
    fake_github: FakeGitHub, client: GitHubClient
) -> None:
    pr = fake_github.add_pull()
    client.post_json(comments_path(fake_github, pr), {"body": "hello"})
    client.get_json(comments_path(fake_github, pr))
    assert len(fake_github.requests) == 2
    for request in fake_github.requests:
        assert request.headers["x-github-api-version"] == API_VERSION == "2022-11-28"
        assert request.headers["accept"] == "application/vnd.github+json"
        assert request.headers["authorization"] == f"Bearer {fake_github.token}"
        assert request.headers["user-agent"].startswith("gpuemu-ci/")


def test_pagination_follows_link_headers_across_pages(fake_github: FakeGitHub, client: GitHubClient) -> None:
    pr = fake_github.add_pull()
    ids = [fake_github.add_comment(pr, f"comment {i}") for i in range(7)]
    seen = list(client.paginate(comments_path(fake_github, pr), {"per_page": 3}))
    assert [c["id"] for c in seen] == ids
    pages = [r.query.get("page", ["1"])[0] for r in fake_github.api_calls("GET", "/comments$")]
    assert pages == ["1", "2", "3"]


def test_pagination_stops_at_max_pages(fake_github: FakeGitHub, client: GitHubClient) -> None:
    pr = fake_github.add_pull()
    for i in range(5):
        fake_github.add_comment(pr, f"comment {i}")
    seen = list(client.paginate(comments_path(fake_github, pr), {"per_page": 2}, max_pages=2))
    assert len(seen) == 4
    assert len(fake_github.api_calls("GET", "/comments$")) == 2


def test_token_is_never_sent_to_a_link_on_another_host(client: GitHubClient) -> None:
    with pytest.raises(GitHubError, match=r"refusing to send the token to evil\.example"):
        client.get_json("https://evil.example/repos/o/r/issues")


def test_server_errors_are_retried_with_backoff_then_succeed(
    fake_github: FakeGitHub, client: GitHubClient, sleeps: SleepRecorder
) -> None:
    pr = fake_github.add_pull()
    fake_github.fail("GET", "/comments$", Failure.server_error(500))
    fake_github.fail("GET", "/comments$", Failure.server_error(502))
    assert client.get_json(comments_path(fake_github, pr)) == []
    assert sleeps.waits == [1.0, 2.0]  # jitter pinned to 0 by the fixture
    assert len(fake_github.api_calls("GET", "/comments$")) == 3


def test_server_errors_give_up_after_max_retries(fake_github: FakeGitHub, sleeps: SleepRecorder) -> None:
    pr = fake_github.add_pull()
    fake_github.fail("GET", "/comments$", Failure.server_error(503), times=10)
    with (
        GitHubClient(
            fake_github.token, fake_github.api_url, max_retries=2, sleep=sleeps, jitter=lambda: 0.0
        ) as gh,
        pytest.raises(GitHubServerError, match="503") as info,
    ):
        gh.get_json(comments_path(fake_github, pr))
    assert info.value.exit_code is ExitCode.INFRASTRUCTURE
    assert "gave up after 2 retries" in info.value.message
    assert len(fake_github.api_calls("GET", "/comments$")) == 3


def test_post_is_not_resent_after_a_server_error(fake_github: FakeGitHub, client: GitHubClient) -> None:
    pr = fake_github.add_pull()
    fake_github.fail("POST", "/comments$", Failure.applied_then_server_error(502))
    with pytest.raises(GitHubServerError, match="not resent"):
        client.post_json(comments_path(fake_github, pr), {"body": "once"})
    assert len(fake_github.api_calls("POST")) == 1
    assert [c["body"] for c in fake_github.comments(pr)] == ["once"]


def test_429_waits_for_retry_after(
    fake_github: FakeGitHub, client: GitHubClient, sleeps: SleepRecorder
) -> None:
    pr = fake_github.add_pull()
    fake_github.fail("POST", "/comments$", Failure.too_many_requests(retry_after=7))
    client.post_json(comments_path(fake_github, pr), {"body": "after the wait"})
    assert sleeps.waits == [7.0]
    assert [c["body"] for c in fake_github.comments(pr)] == ["after the wait"]


def test_secondary_limit_with_retry_after(
    fake_github: FakeGitHub, client: GitHubClient, sleeps: SleepRecorder
) -> None:
    pr = fake_github.add_pull()
    fake_github.fail("GET", "/comments$", Failure.secondary_rate_limit(retry_after=42))
    client.get_json(comments_path(fake_github, pr))
    assert sleeps.waits == [42.0]


def test_secondary_limit_without_headers_waits_a_minute_then_doubles(
    fake_github: FakeGitHub, client: GitHubClient, sleeps: SleepRecorder
) -> None:
    pr = fake_github.add_pull()
    fake_github.fail("GET", "/comments$", Failure.secondary_rate_limit(), times=2)
    client.get_json(comments_path(fake_github, pr))
    assert sleeps.waits == [60.0, 120.0]


def test_exhausted_primary_limit_waits_until_reset(
    fake_github: FakeGitHub, client: GitHubClient, sleeps: SleepRecorder
) -> None:
    pr = fake_github.add_pull()
    fake_github.fail("GET", "/comments$", Failure.primary_rate_limit(reset_epoch=int(NOW) + 30))
    client.get_json(comments_path(fake_github, pr))
    assert sleeps.waits == [31.0]  # until the reset, plus one second of slack


def test_a_wait_beyond_the_budget_fails_at_once_without_sleeping(
    fake_github: FakeGitHub, sleeps: SleepRecorder
) -> None:
    pr = fake_github.add_pull()
    fake_github.fail("GET", "/comments$", Failure.primary_rate_limit(reset_epoch=int(NOW) + 3600))
    with (
        GitHubClient(
            fake_github.token, fake_github.api_url, max_total_wait=300, sleep=sleeps, clock=lambda: NOW
        ) as gh,
        pytest.raises(GitHubRateLimitError, match="over the remaining retry budget of 300 s"),
    ):
        gh.get_json(comments_path(fake_github, pr))
    assert sleeps.waits == []
    assert len(fake_github.api_calls("GET", "/comments$")) == 1


def test_total_wait_is_bounded_across_retries(fake_github: FakeGitHub, sleeps: SleepRecorder) -> None:
    pr = fake_github.add_pull()
    fake_github.fail("GET", "/comments$", Failure.secondary_rate_limit(), times=10)
    with (
        GitHubClient(
            fake_github.token, fake_github.api_url, max_retries=10, max_total_wait=300, sleep=sleeps
        ) as gh,
        pytest.raises(GitHubRateLimitError),
    ):
        gh.get_json(comments_path(fake_github, pr))
    assert sleeps.waits == [60.0, 120.0]  # 60 + 120 + 240 would pass 300 s
    assert sum(sleeps.waits) <= 300


def test_read_only_403_is_not_retried(
    fake_github: FakeGitHub, client: GitHubClient, sleeps: SleepRecorder
) -> None:
    pr = fake_github.add_pull()
    fake_github.read_only = True
    with pytest.raises(GitHubForbiddenError, match="Resource not accessible by integration") as info:
        client.post_json(comments_path(fake_github, pr), {"body": "x"})
    assert info.value.status == 403
    assert "permissions" in info.value.diagnostics()
    assert sleeps.waits == []
    assert len(fake_github.requests) == 1


def test_bad_token_is_an_auth_error_that_does_not_echo_the_token(fake_github: FakeGitHub) -> None:
    secret = "ghs_wrong_token_value_123"
    with GitHubClient(secret, fake_github.api_url) as gh, pytest.raises(GitHubAuthError) as info:
        gh.get_json(f"/repos/{fake_github.repository}/actions/artifacts")
    assert "Bad credentials" in info.value.message
    assert secret not in info.value.diagnostics()
    assert secret not in repr(gh)


def test_token_stays_out_of_logs_and_repr(
    fake_github: FakeGitHub, sleeps: SleepRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    pr = fake_github.add_pull()
    fake_github.fail("GET", "/comments$", Failure.server_error(500))
    caplog.set_level(logging.DEBUG)
    with GitHubClient(fake_github.token, fake_github.api_url, sleep=sleeps) as gh:
        gh.get_json(comments_path(fake_github, pr))
        assert fake_github.token not in repr(gh)
    assert "retrying" in caplog.text
    assert fake_github.token not in caplog.text


def test_unreachable_api_is_a_network_error_after_retries(sleeps: SleepRecorder) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    unreachable = f"http://127.0.0.1:{port}"
    with (
        GitHubClient("t", unreachable, max_retries=2, sleep=sleeps, jitter=lambda: 0.0) as gh,
        pytest.raises(GitHubNetworkError) as info,
    ):
        gh.get_json("/repos/o/r/issues")
    assert isinstance(info.value, GpuemuError)
    assert sleeps.waits == [1.0, 2.0]


@pytest.mark.parametrize("token", ["with space", "line\nbreak", "tab\t"])
def test_tokens_that_cannot_be_a_header_are_a_usage_error(token: str) -> None:
    with pytest.raises(UsageError, match="cannot be sent"):
        GitHubClient(token)


def test_api_url_must_be_http(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not an http"):
        GitHubClient("t", "ftp://example.com")


# -- downloads ------------------------------------------------------------------------------


def test_download_follows_redirect_without_the_token(
    fake_github: FakeGitHub, client: GitHubClient, tmp_path: Path
) -> None:
    run = fake_github.add_run(event="push", head_branch="main", head_sha="c" * 40)
    artifact = fake_github.add_artifact(run, files={"results.json": b'{"ok": true}'})
    size = client.download(artifact["archive_download_url"], tmp_path / "a.zip", max_bytes=1 << 20)
    assert size == (tmp_path / "a.zip").stat().st_size > 0
    assert len(fake_github.storage_requests) == 1
    assert "authorization" not in fake_github.storage_requests[0].headers
    assert "x-github-api-version" not in fake_github.storage_requests[0].headers
    assert fake_github.requests[-1].headers["authorization"] == f"Bearer {fake_github.token}"


def test_expired_download_is_410_gone(fake_github: FakeGitHub, client: GitHubClient, tmp_path: Path) -> None:
    run = fake_github.add_run(event="push", head_branch="main", head_sha="c" * 40)
    artifact = fake_github.add_artifact(run, expired=True)
    with pytest.raises(GitHubGoneError, match="410"):
        client.download(artifact["archive_download_url"], tmp_path / "a.zip", max_bytes=1 << 20)
    assert fake_github.storage_requests == []


def test_download_over_the_cap_is_refused_and_removed(
    fake_github: FakeGitHub, client: GitHubClient, tmp_path: Path
) -> None:
    run = fake_github.add_run(event="push", head_branch="main", head_sha="c" * 40)
    artifact = fake_github.add_artifact(run, zip_bytes=b"z" * 5000)
    with pytest.raises(GitHubDownloadTooLargeError, match="1,000-byte cap"):
        client.download(artifact["archive_download_url"], tmp_path / "a.zip", max_bytes=1000)
    assert not (tmp_path / "a.zip").exists()


def test_storage_errors_are_retried(
    fake_github: FakeGitHub, client: GitHubClient, sleeps: SleepRecorder, tmp_path: Path
) -> None:
    run = fake_github.add_run(event="push", head_branch="main", head_sha="c" * 40)
    artifact = fake_github.add_artifact(run)
    fake_github.fail("GET", r"^/blob/", Failure.server_error(503))
    client.download(artifact["archive_download_url"], tmp_path / "a.zip", max_bytes=1 << 20)
    assert len(fake_github.storage_requests) == 2
    assert sleeps.waits == [1.0]
