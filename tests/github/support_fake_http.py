"""The HTTP plumbing of the fake GitHub API: a threaded stdlib server on 127.0.0.1 and request records."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

Reply = tuple[int, Any, dict[str, str]]


@dataclass(frozen=True)
class Recorded:
    """One request as the server saw it (header names lower-cased)."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


@dataclass
class Streamed:
    """A body written a chunk at a time as the client reads it: a huge answer the server never holds whole.
    Without `declare_length` it has no Content-Length and ends when the connection closes. `sent` counts the
    bytes that went out before the client hung up (`hung_up`) or the whole body (`finished`)."""

    chunk: bytes
    count: int
    prefix: bytes = b""
    suffix: bytes = b""
    declare_length: bool = True
    sent: int = 0
    finished: bool = False
    hung_up: bool = False

    def wait(self, seconds: float = 10.0) -> None:
        """Until the server finished writing or found the client gone (or `seconds` passed)."""
        deadline = time.monotonic() + seconds
        while not (self.finished or self.hung_up) and time.monotonic() < deadline:
            time.sleep(0.02)

    @property
    def length(self) -> int:
        return len(self.prefix) + len(self.chunk) * self.count + len(self.suffix)

    def chunks(self) -> Iterator[bytes]:
        yield self.prefix
        for _ in range(self.count):
            yield self.chunk
        yield self.suffix


@dataclass(frozen=True)
class RecordedResponse:
    """One API response, with the OpenAPI path template of the operation it answered."""

    template: str
    method: str
    status: int
    body: Any
    headers: dict[str, str]


class LoopbackServer:
    """One ThreadingHTTPServer on an ephemeral loopback port, serving ``handle``."""

    def __init__(
        self,
        handle: Callable[[Recorded], tuple[str, Reply]],
        on_response: Callable[[RecordedResponse], None] | None = None,
    ) -> None:
        self._handle = handle
        self._on_response = on_response
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},
            name=f"fake {self.url}",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes; with Nagle on, the second waits for the client's delayed
            # ACK of the first (about 40 ms a request on loopback).
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:  # quiet test output
                return

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                parts = urlsplit(self.path)
                request = Recorded(
                    method=self.command,
                    path=parts.path,
                    query=parse_qs(parts.query),
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=self.rfile.read(length) if length else b"",
                )
                template, (status, body, headers) = server._handle(request)
                self._send(template, request, status, body, headers)

            def _send(
                self, template: str, request: Recorded, status: int, body: Any, headers: dict[str, str]
            ) -> None:
                if isinstance(body, Streamed):
                    self._stream(status, body, headers)
                    return
                if isinstance(body, bytes):
                    payload = body
                elif body is None:
                    payload = b""
                else:
                    payload = json.dumps(body).encode("utf-8")
                    headers = {"Content-Type": "application/json; charset=utf-8", **headers}
                if server._on_response is not None:
                    lower = {k.lower(): v for k, v in headers.items()}
                    server._on_response(RecordedResponse(template, request.method, status, body, lower))
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _stream(self, status: int, body: Streamed, headers: dict[str, str]) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                if body.declare_length:
                    self.send_header("Content-Length", str(body.length))
                else:
                    self.send_header("Connection", "close")  # the body ends where the connection does
                    self.close_connection = True
                self.end_headers()
                try:
                    for chunk in body.chunks():
                        self.wfile.write(chunk)
                        body.sent += len(chunk)
                    self.wfile.flush()
                    body.finished = True
                except OSError:  # the client hung up
                    body.hung_up = True
                    self.close_connection = True

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _serve

        return Handler
