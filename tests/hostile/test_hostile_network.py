"""A network that misbehaves (issue #14, item 13): real sockets on 127.0.0.1.

- A server that trickles its answer one byte at a time never trips a per-read timeout; the client's overall
  deadline ends the request anyway, and closes the connection it was stuck on.
- A refused connection is reported as a connection problem, not as a missing `actions: read` permission (the
  Action's entrypoint against an API port nobody listens on).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuemu_ci.github.client import GitHubClient, GitHubNetworkError
from tests.action.support_runner import pull_request_event, run_step, runner_env, write_tiny_project
from tests.github.support_fake_api import FakeGitHub

HEAD, BASE, MERGE = "c" * 40, "d" * 40, "e" * 40


class Trickler:
    """Accepts connections and answers each with a valid HTTP response one byte every `interval` seconds, until
    the client hangs up. Records how many bytes it had sent when that happened."""

    def __init__(self, response: bytes, interval: float = 0.2) -> None:
        self.response, self.interval = response, interval
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.sent_before_hangup: list[int] = []
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
        pr = fake.add_pull(head_sha=HEAD, base_sha=BASE)
        event = pull_request_event(fake, pr, head_sha=HEAD, base_sha=BASE)
        workspace = write_tiny_project(tmp_path / "ws")
        env = runner_env(fake, workspace, "pull_request", event, sha=MERGE, ref=f"refs/pull/{pr}/merge",
                         inputs={"mode": "gate", "baseline": "auto"})  # fmt: skip
    env["GITHUB_API_URL"] = f"http://127.0.0.1:{closed_port}"
    step = run_step(env)
    assert step.returncode == 0, step.describe()  # the gate decides on its own results
    (warning,) = [m for m in step.messages("warning") if m.startswith("baseline")]
    assert "could not be reached" in warning and "ConnectError" in warning, warning
    assert "actions: read" not in warning and "permission" not in warning.replace("not a permission", "")
    comment_warnings = [m for m in step.messages("warning") if "comment" in m.lower()]
    assert comment_warnings and "ConnectError" in comment_warnings[0]
    assert step.results()["diff"]["status"] == "no_baseline"
