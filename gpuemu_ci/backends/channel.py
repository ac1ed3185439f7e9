"""Length-prefixed frames over the pool's Unix socket, with file descriptors riding along (SCM_RIGHTS).

A frame is an 8-byte little-endian length and that many bytes. The worker reads its parent's frames with
blocking calls (the parent is trusted); the parent reads a worker's frames without ever blocking, through a
`FrameReader` that refuses a frame longer than its limit: a worker runs user code, and user code can write
anything into the socket, including a length that never arrives.
"""

from __future__ import annotations

import array
import select
import socket
import struct
import time
from collections.abc import Sequence

_HEADER = struct.Struct("<Q")
MAX_FDS = 4


class FrameError(Exception):
    """The peer sent something that is not a frame we accept."""


def send_frame(
    sock: socket.socket, payload: bytes, fds: Sequence[int] = (), timeout_s: float | None = None
) -> None:
    """Send one frame; `fds` go with its first byte. On a non-blocking socket it waits for room at most
    `timeout_s` (TimeoutError after that: a peer that stopped reading)."""
    data = memoryview(_HEADER.pack(len(payload)) + payload)
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while data:
        try:
            sent = sock.sendmsg([data], ancillary)
        except (BlockingIOError, InterruptedError):
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError("the peer does not read its socket") from None
            select.select([], [sock], [], remaining)
            continue
        ancillary = []
        data = data[sent:]


def _recv_exactly(sock: socket.socket, n: int, fds: list[int]) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        msg, ancdata, _flags, _addr = sock.recvmsg(n - len(chunks), socket.CMSG_SPACE(MAX_FDS * 4))
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                received = array.array("i")
                received.frombytes(data[: len(data) - len(data) % received.itemsize])
                fds.extend(received)
        if not msg:
            raise EOFError("the peer closed the connection")
        chunks += msg
    return bytes(chunks)


def recv_frame(sock: socket.socket) -> tuple[bytes, list[int]]:
    """Receive one frame (blocking) and the descriptors that came with it; EOFError when the peer is gone."""
    fds: list[int] = []
    (length,) = _HEADER.unpack(_recv_exactly(sock, _HEADER.size, fds))
    return _recv_exactly(sock, length, fds), fds


class FrameReader:
    """The parent's side: feed it what a non-blocking socket has, get whole frames back."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buffer = bytearray()

    def feed(self, sock: socket.socket) -> tuple[list[bytes], bool]:
        """Read what is available: (complete frames, whether the peer closed). FrameError for a frame over
        the limit."""
        closed = False
        while True:
            try:
                chunk = sock.recv(1 << 20)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            self._buffer += chunk
            if len(self._buffer) > self.limit + _HEADER.size:
                break
        frames = []
        while len(self._buffer) >= _HEADER.size:
            (length,) = _HEADER.unpack_from(self._buffer)
            if length > self.limit:
                raise FrameError(f"a reply of {length:,} bytes (at most {self.limit:,} are accepted)")
            if len(self._buffer) < _HEADER.size + length:
                break
            frames.append(bytes(self._buffer[_HEADER.size : _HEADER.size + length]))
            del self._buffer[: _HEADER.size + length]
        return frames, closed
