"""One attempt of a request to GitHub, bounded in time, in bytes and by signals.

The attempt runs in a daemon thread while the caller's thread waits for it in short slices, so that it can
give up at the attempt's deadline (a server that trickles its answer never trips httpx's per-read timeout) or
as soon as SIGINT or SIGTERM arrives: where a process holds those signals back (the Action's, until it has
written what it must: early_signals.py), `stop_requested` reports them; where a handler raises
(KeyboardInterrupt), the raise ends the wait. Either way the connection the thread is stuck on is closed
(`abandon`), which ends the thread too.

Answers are read as streams up to a cap (limits.BodyCap): past it the connection is closed, never read on.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import httpx

from gpuemu_ci.errors import Interrupted
from gpuemu_ci.github.api_errors import GitHubAnswerTooLargeError, GitHubDownloadTooLargeError
from gpuemu_ci.github.limits import ERROR_BODY_BYTES, BodyCap

POLL_S = 0.1  # how often a waiting request looks for a signal held back
_ABANDONED_JOIN_S = 5.0
# Headers that describe the bytes on the wire, not the body handed on (already decoded and counted).
_WIRE_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})

_T = TypeVar("_T")


class DeadlineExceeded(httpx.TransportError):
    """An attempt got no complete answer before its deadline (a stalled or trickling server)."""


def never() -> int | None:
    """`stop_requested` for a process that holds no signal back."""
    return None


def bounded(
    seconds: float,
    call: Callable[[], _T],
    abandon: Callable[[], None],
    stop_requested: Callable[[], int | None] = never,
) -> _T:
    """`call()`, run in a daemon thread; DeadlineExceeded when it has not finished after `seconds`, Interrupted
    when `stop_requested` names a signal first. `abandon` closes the connections it may be stuck on."""
    outcome: list[_T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # handed to the caller below
            failure.append(exc)

    worker = threading.Thread(target=run, name="gpuemu-http", daemon=True)
    worker.start()
    try:
        stop = _wait(worker, time.monotonic() + seconds, stop_requested)
    except BaseException:  # a signal handler raised (KeyboardInterrupt): leave nothing reading
        abandon()
        raise
    if stop is not None:
        abandon()
        worker.join(_ABANDONED_JOIN_S)
        if stop < 0:
            raise DeadlineExceeded(f"no complete answer within {seconds:g} s")
        raise Interrupted(
            f"{signal.Signals(stop).name} while waiting for GitHub's API: the request was abandoned", stop
        )
    if failure:
        raise failure[0]
    return outcome[0]


def _wait(worker: threading.Thread, deadline: float, stop_requested: Callable[[], int | None]) -> int | None:
    """None once `worker` finished; the signal number when one is held back first; -1 at the deadline."""
    while True:
        signum = stop_requested()
        if signum is not None:
            return signum
        left = deadline - time.monotonic()
        if left <= 0:
            return -1
        worker.join(min(POLL_S, left))
        if not worker.is_alive():
            return None


def pause(seconds: float, stop_requested: Callable[[], int | None] = never) -> None:
    """`time.sleep(seconds)` that ends early, with Interrupted, when a signal is held back."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        signum = stop_requested()
        if signum is not None:
            raise Interrupted(
                f"{signal.Signals(signum).name} while waiting to retry a GitHub API request", signum
            )
        time.sleep(min(POLL_S, left))


def read_answer(
    http: httpx.Client,
    method: str,
    url: str,
    *,
    params: Mapping[str, Any] | None,
    json: Any,
    ok: tuple[int, ...],
    cap: BodyCap,
    what: str,
) -> httpx.Response:
    """Send one request and read its answer as a stream: a success up to `cap` (GitHubAnswerTooLargeError past
    it, the rest unread), an error answer up to ERROR_BODY_BYTES (cut there: its message is at the start)."""
    with http.stream(method, url, params=params, json=json) as response:
        if response.status_code in ok:
            _check_declared(response, cap.limit, GitHubAnswerTooLargeError, what, cap.describe())
            body = _collect(response.iter_bytes(), cap.limit, what, cap.describe())
        else:
            body = _collect(response.iter_bytes(), ERROR_BODY_BYTES, what, None)
    return _buffered(response, body)


def download_once(
    storage: httpx.Client, url: str, dest: Path, max_bytes: int, what: str
) -> tuple[httpx.Response, int | None]:
    """One GET of a storage URL: (the response, bytes written into `dest` when it answered 200); a
    GitHubDownloadTooLargeError past `max_bytes`, with nothing left in `dest`."""
    with storage.stream("GET", url) as response:
        if response.status_code == 200:
            cap = f"the {max_bytes:,}-byte cap"
            _check_declared(response, max_bytes, GitHubDownloadTooLargeError, what, cap)
            return response, write_capped(dest, response.iter_bytes(), max_bytes, what)
        body = _collect(response.iter_bytes(), ERROR_BODY_BYTES, what, None)
    return _buffered(response, body), None


def write_capped(dest: Path, chunks: Iterable[bytes], max_bytes: int, what: str) -> int:
    """Write `chunks` into `dest`, at most `max_bytes` of them (GitHubDownloadTooLargeError past that, `dest`
    removed); the bytes written."""
    total = 0
    try:
        with dest.open("wb") as fh:
            for chunk in chunks:
                total += len(chunk)
                if total > max_bytes:
                    raise GitHubDownloadTooLargeError(what, f"more than the {max_bytes:,}-byte cap")
                fh.write(chunk)
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    return total


def _check_declared(
    response: httpx.Response, limit: int, error: type[GitHubAnswerTooLargeError], what: str, cap: str
) -> None:
    declared = response.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise error(what, f"the answer declares {int(declared):,} bytes, over {cap}; it was not read")


def _collect(chunks: Iterable[bytes], limit: int, what: str, cap: str | None) -> bytes:
    """At most `limit` bytes of `chunks`: past it, GitHubAnswerTooLargeError naming `cap`, or (no `cap`) the
    first `limit` bytes."""
    body = bytearray()
    for chunk in chunks:
        body += chunk
        if len(body) > limit:
            if cap is not None:
                raise GitHubAnswerTooLargeError(
                    what, f"the answer is larger than {cap}; the rest was not read"
                )
            del body[limit:]
            break
    return bytes(body)


def _buffered(response: httpx.Response, body: bytes) -> httpx.Response:
    """A complete response holding `body` (decoded), for a streamed one that was read only as far as allowed."""
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _WIRE_HEADERS]
    return httpx.Response(response.status_code, headers=headers, content=body, request=response.request)
