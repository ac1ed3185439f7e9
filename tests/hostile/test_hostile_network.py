"""A network that misbehaves (issue #14, item 13; issue #52, items 1 and 2): real sockets on 127.0.0.1.

- A server that trickles its answer one byte at a time never trips a per-read timeout; the client's deadline
  per attempt ends the request anyway, and closes the connection it was stuck on. All of a client's work,
  retries and their waits included, shares one budget (the Action's `api_timeout`): a trickling API cannot
  hold the Action past it (before: 16 requests of ~90 s each, over 25 minutes).
- An answer larger than its endpoint's cap is refused as it streams in, naming what was being fetched (before:
  buffered whole, 5.2 GB in the token's process).
- SIGTERM stops a request that is waiting on the network at once (before: held until the request ended).
- A refused connection is reported as a connection problem, not as a missing `actions: read` permission (the
  Action's entrypoint against an API port nobody listens on).
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuemu_ci.errors import ExitCode, Interrupted
from gpuemu_ci.github.client import (
    GitHubAnswerTooLargeError,
    GitHubClient,
    GitHubDeadlineError,
    GitHubNetworkError,
    GitHubNotFoundError,
    GitHubRateLimitError,
)
from gpuemu_ci.github.comments import COMMENTS_PAGE
from tests.action.support_runner import (
    pull_request_event,
    run_step,
    runner_env,
    start_step,
    step_result,
    write_tiny_project,
)
from tests.github.support_fake_api import Failure, FakeGitHub
from tests.github.support_fake_http import Streamed

HEAD, BASE, MERGE = "c" * 40, "d" * 40, "e" * 40


class Trickler:
    """Accepts connections and answers each with a valid HTTP response one byte every `interval` seconds, until
    the client hangs up. Records how many bytes it had sent when that happened."""

    def __init__(self, response: bytes, interval: float = 0.2) -> None:
        self.response, self.interval = response, interval
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.sent_before_hangup: list[int] = []
        self.requested = threading.Event()  # a request arrived
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> Trickler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        conn.recv(65536)  # the request
        self.requested.set()
        sent = 0
        with conn:
            for byte in self.response:
                if self._stop.is_set():
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    break
                sent += 1
                time.sleep(self.interval)
        self.sent_before_hangup.append(sent)


BODY = b'{"artifacts": [], "total_count": 0}' + b" " * 400
SLOW_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
    len(BODY),
    BODY,
)


def _gate_step(fake: FakeGitHub, tmp_path: Path, inputs: dict[str, str]) -> tuple[dict[str, str], int]:
    """The environment of the Action's step on a pull request of `fake` (a tiny passing project), and the PR."""
    pr = fake.add_pull(head_sha=HEAD, base_sha=BASE)
    event = pull_request_event(fake, pr, head_sha=HEAD, base_sha=BASE)
    workspace = write_tiny_project(tmp_path / "ws")
    ref = f"refs/pull/{pr}/merge"
    return runner_env(fake, workspace, "pull_request", event, sha=MERGE, ref=ref, inputs=inputs), pr


@pytest.mark.slow
@pytest.mark.parametrize("attempts", [0, 2])
def test_a_trickling_server_is_cut_off_at_the_overall_deadline(attempts: int) -> None:
    with Trickler(SLOW_ANSWER) as server:
        client = GitHubClient(
            "ghs_x",
            f"http://127.0.0.1:{server.port}",
            timeout=1.0,  # never tripped: a byte arrives every 0.2 s
            deadline=2.0,
            max_retries=attempts,
            sleep=lambda _: None,
            jitter=lambda: 0.0,
        )
        with client, pytest.raises(GitHubNetworkError) as caught:
            client.get_json("/repos/o/r/actions/artifacts")
        assert "no complete answer within 2 s" in caught.value.message
        deadline = time.monotonic() + 10
        while len(server.sent_before_hangup) < attempts + 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        # The client hung up on every attempt, long before the answer was complete (a retry is a new request).
        assert len(server.sent_before_hangup) == attempts + 1
        assert all(sent < len(SLOW_ANSWER) for sent in server.sent_before_hangup)


@pytest.mark.slow
def test_a_trickling_download_is_cut_off_too(tmp_path: Path) -> None:
    payload = b"PK" + b"\0" * 2000
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(payload), payload)
    with Trickler(answer, interval=0.05) as storage, FakeGitHub() as fake:
        client = GitHubClient(fake.token, fake.api_url, timeout=1.0, download_deadline=2.0, max_retries=0)
        run = fake.add_run(event="push", head_branch="main", head_sha=BASE)
        artifact = fake.add_artifact(run, "gpuemu-baseline", {"baseline.json": b"{}"})
        fake.blob_location = lambda artifact_id: f"http://127.0.0.1:{storage.port}/blob"  # type: ignore[method-assign]
        with client, pytest.raises(GitHubNetworkError) as caught:
            client.download(artifact["archive_download_url"], tmp_path / "a.zip", max_bytes=1 << 20)
    assert "no complete answer within 2 s" in caught.value.message
    assert not (tmp_path / "a.zip").exists()  # no half-written download is left behind


@pytest.fixture
def closed_port() -> Iterator[int]:
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nobody listens there now: connections are refused
    yield port


@pytest.mark.slow  # every API call retries a refused connection with backoff, as it would a real blip
def test_an_unreachable_api_is_called_a_connection_problem(closed_port: int, tmp_path: Path) -> None:
    with FakeGitHub() as fake:
        env, _pr = _gate_step(fake, tmp_path, {"mode": "gate", "baseline": "auto"})
    env["GITHUB_API_URL"] = f"http://127.0.0.1:{closed_port}"
    step = run_step(env)
    assert step.returncode == 0, step.describe()  # the gate decides on its own results
    (warning,) = [m for m in step.messages("warning") if m.startswith("baseline")]
    assert "could not be reached" in warning and "ConnectError" in warning, warning
    assert "actions: read" not in warning and "permission" not in warning.replace("not a permission", "")
    comment_warnings = [m for m in step.messages("warning") if "comment" in m.lower()]
    assert comment_warnings and "ConnectError" in comment_warnings[0]
    assert step.results()["diff"]["status"] == "no_baseline"


def _hangups(server: Trickler, count: int) -> list[int]:
    """What the server had sent when the client hung up, once `count` connections have ended (10 s at most)."""
    deadline = time.monotonic() + 10
    while len(server.sent_before_hangup) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return server.sent_before_hangup


# --- one deadline for all of the API work, retries inside it (issue #52, item 1) ----------------------------


@pytest.mark.slow
def test_all_of_a_clients_api_work_shares_one_deadline_retries_and_waits_included() -> None:
    waits: list[float] = []
    with Trickler(SLOW_ANSWER) as server:
        client = GitHubClient(
            "ghs_x",
            f"http://127.0.0.1:{server.port}",
            deadline=1.0,  # each attempt: cut after a second
            total_deadline=2.5,  # and all of them, with the waits between them
            total_source="input api_timeout",
            max_retries=10,
            sleep=waits.append,
            jitter=lambda: 0.0,
        )
        with client, pytest.raises(GitHubDeadlineError) as caught:
            client.get_json("/repos/o/r/actions/artifacts")
        # Attempt 1 (1 s), a 1 s wait, then attempt 2 cut by what was left (0.5 s): ten retries never happen.
        assert len(_hangups(server, 2)) == 2
    assert waits == [1.0]
    assert "the 2.5 s allowed for GitHub API work in all (input api_timeout) ran out" in caught.value.message
    assert caught.value.exit_code == ExitCode.INFRASTRUCTURE
    assert client.budget.remaining() <= 0


def test_a_request_is_not_sent_once_the_budget_is_spent(fake_github: FakeGitHub) -> None:
    with GitHubClient(fake_github.token, fake_github.api_url, total_deadline=5.0) as client:
        client.budget.spend(5.0)
        with pytest.raises(GitHubDeadlineError, match="the 5 s allowed for GitHub API work in all ran out"):
            client.get_json("/user")
    assert fake_github.requests == []


def test_a_retry_wait_longer_than_what_is_left_fails_at_once(fake_github: FakeGitHub) -> None:
    pr = fake_github.add_pull()
    fake_github.fail("GET", "/comments$", Failure.too_many_requests(retry_after=30))
    waits: list[float] = []
    client = GitHubClient(fake_github.token, fake_github.api_url, total_deadline=20.0, sleep=waits.append)
    with (
        client,
        pytest.raises(GitHubRateLimitError, match="over the remaining retry budget of 20 s"),
    ):
        client.get_json(f"/repos/{fake_github.repository}/issues/{pr}/comments")
    assert waits == []  # not slept first and failed after


@pytest.mark.slow
def test_a_trickling_api_holds_the_action_no_longer_than_api_timeout(tmp_path: Path) -> None:
    """Every API answer trickles: the baseline lookup is cut at `api_timeout` and nothing more is sent; the
    gate decides on its own results and says what was skipped."""
    with FakeGitHub() as fake, Trickler(SLOW_ANSWER) as server:
        env, _pr = _gate_step(fake, tmp_path, {"mode": "gate", "baseline": "auto", "api_timeout": "3"})
        env["GITHUB_API_URL"] = f"http://127.0.0.1:{server.port}"
        step = run_step(env)
        assert len(_hangups(server, 1)) == 1  # one request, cut off: no retry, no comment request after it
    assert step.returncode == 0, step.describe()
    (baseline,) = [m for m in step.messages("warning") if m.startswith("baseline")]
    assert "the 3 s allowed for GitHub API work in all (input api_timeout) ran out" in baseline, baseline
    (comment,) = [m for m in step.messages("warning") if m.startswith("PR comment")]
    assert "ran out" in comment, comment
    assert step.results()["verdict"] == "passed"


@pytest.mark.slow
def test_api_timeout_must_be_a_number_of_seconds(tmp_path: Path) -> None:
    with FakeGitHub() as fake:
        env, _pr = _gate_step(fake, tmp_path, {"mode": "gate", "api_timeout": "soon"})
        step = run_step(env)
    assert step.returncode == ExitCode.USAGE, step.describe()
    assert "input api_timeout='soon': expected a number of seconds" in step.stderr
    assert fake.requests == []


# --- answers read as streams, up to a cap per endpoint (issue #52, item 2) ----------------------------------


def _flood(declare_length: bool, mib: int = 96) -> Streamed:
    """A valid (empty) JSON list of `mib` MiB: spaces between its brackets."""
    return Streamed(b" " * (1 << 20), mib, prefix=b"[", suffix=b"]", declare_length=declare_length)


@pytest.mark.parametrize("declared", [True, False], ids=["declared-length", "until-close"])
def test_an_answer_over_its_endpoints_cap_is_cut_off_and_named(
    fake_github: FakeGitHub, declared: bool
) -> None:
    pr = fake_github.add_pull()
    flood = _flood(declared)
    fake_github.fail("GET", "/comments$", Failure.huge(flood))
    path = f"/repos/{fake_github.repository}/issues/{pr}/comments"
    client = GitHubClient(fake_github.token, fake_github.api_url)
    with client, pytest.raises(GitHubAnswerTooLargeError) as caught:
        list(client.paginate(path, cap=COMMENTS_PAGE))
    message = caught.value.message
    assert f"GET {path}" in message and "32 MiB cap on a page of the pull request's comments" in message
    assert caught.value.exit_code == ExitCode.INFRASTRUCTURE
    flood.wait()
    assert flood.hung_up and flood.sent < flood.length  # the client hung up: the rest was never sent


def test_an_error_answer_is_read_only_as_far_as_its_message(fake_github: FakeGitHub) -> None:
    flood = _flood(declare_length=False)
    fake_github.fail("GET", "/user$", Failure(404, flood))
    client = GitHubClient(fake_github.token, fake_github.api_url)
    with client, pytest.raises(GitHubNotFoundError) as caught:
        client.get_json("/user")
    assert "404" in caught.value.message
    flood.wait()
    assert flood.hung_up and flood.sent < flood.length


@pytest.mark.slow
def test_a_flood_of_comments_cannot_fill_the_actions_memory(tmp_path: Path) -> None:
    """The comments listing answers 96 MiB: the Action stops reading at the page's cap, says so, and the gate's
    verdict stands (before: every byte buffered in the process that holds the token, then a comment posted)."""
    with FakeGitHub() as fake:
        env, pr = _gate_step(fake, tmp_path, {"mode": "gate", "baseline": "none"})
        flood = _flood(declare_length=False)
        fake.fail("GET", "/comments$", Failure.huge(flood))
        step = run_step(env)
        comments = fake.comments(pr)
    assert step.returncode == 0, step.describe()
    (warning,) = [m for m in step.messages("warning") if m.startswith("PR comment")]
    assert f"/issues/{pr}/comments failed: the answer is larger than the 32 MiB cap" in warning, warning
    assert "a page of the pull request's comments" in warning
    flood.wait()
    assert comments == [] and flood.hung_up


# --- signals while waiting on the network (issue #52, item 2) -----------------------------------------------


def test_a_signal_held_back_ends_a_request_at_once() -> None:
    with Trickler(SLOW_ANSWER) as server:
        client = GitHubClient(
            "ghs_x",
            f"http://127.0.0.1:{server.port}",
            stop_requested=lambda: signal.SIGTERM if server.requested.is_set() else None,
        )
        with client, pytest.raises(Interrupted) as caught:
            client.get_json("/repos/o/r/actions/artifacts")
        (sent,) = _hangups(server, 1)
    assert caught.value.exit_code == 128 + signal.SIGTERM
    assert "SIGTERM while waiting for GitHub's API" in caught.value.message
    assert sent < len(SLOW_ANSWER)


@pytest.mark.slow
def test_sigterm_stops_the_action_while_it_waits_on_the_api(tmp_path: Path) -> None:
    """The runner cancels the step while the baseline lookup waits on a trickling API (its answer would take
    80 s, within the 300 s allowed): the Action stops at once, exit 143, and hangs up."""
    with FakeGitHub() as fake, Trickler(SLOW_ANSWER) as server:
        env, _pr = _gate_step(fake, tmp_path, {"mode": "gate", "baseline": "auto"})
        env["GITHUB_API_URL"] = f"http://127.0.0.1:{server.port}"
        process = start_step(env)
        try:
            assert server.requested.wait(60), "the Action never asked the API"
            process.send_signal(signal.SIGTERM)
            stdout, stderr = process.communicate(timeout=30)  # far less than the answer's 80 s
        finally:
            process.kill()
        (sent,) = _hangups(server, 1)
    step = step_result(env, process.returncode, stdout, stderr)
    assert step.returncode == 128 + signal.SIGTERM, step.describe()
    assert "SIGTERM while waiting for GitHub's API" in step.stderr
    assert sent < len(SLOW_ANSWER)
