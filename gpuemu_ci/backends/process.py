"""One worker process seen from the parent: start it, talk to it, read its output, kill it with its group.

The process is a fresh interpreter (`python -m gpuemu_ci.backends.worker`, never a fork of this process, so no
threads, locks, CUDA context or signal handlers are inherited) in its own session, so that killing its process
group reaches whatever the user code started. Its stdout and stderr go to a pipe the parent drains as it
arrives, keeping only the last LOG_KEEP bytes: a kernel that prints 50 MiB per case costs the parent a read,
never the disk or its memory. Nothing of a worker lives in the file system.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from gpuemu_ci.backends.channel import FrameReader, send_frame
from gpuemu_ci.backends.protocol import Stage, dumps_request
from gpuemu_ci.backends.zygote import ForkServer
from gpuemu_ci.errors import InfraError
from gpuemu_ci.launch import PYTHON_FLAGS

LOG_KEEP = 64 << 10  # bytes of a worker's output kept (the tail attached to failures is shorter)
REPLY_LIMIT = 16 << 20  # bytes of one reply: messages are clipped far below this by the worker
SEND_TIMEOUT_S = 10.0
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def exit_words(returncode: int | None, oom_killed: bool | None = None) -> str:
    """How a worker ended, in words. `oom_killed` (backends/oom.py): whether the kernel recorded an
    out-of-memory kill while it ran (None: unknown); only then does a SIGKILL mention memory."""
    if returncode is None:
        return "stopped responding"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        hint = ""
        if name == "SIGKILL" and oom_killed:
            hint = " (the kernel's out-of-memory killer: it recorded an OOM kill while the case ran)"
        elif name == "SIGKILL" and oom_killed is False:
            hint = " (not for lack of memory: the kernel recorded no OOM kill; another process sent it)"
        return f"was killed by {name}{hint}"
    return f"exited with code {returncode}"


class LogTail:
    """The last LOG_KEEP bytes a worker wrote, and how many it wrote in all (for per-case marks)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        """Appends output the worker wrote, keeping the last LOG_KEEP bytes."""
        self.total += len(chunk)
        self.data += chunk
        if len(self.data) > LOG_KEEP:
            del self.data[: len(self.data) - LOG_KEEP]

    def since(self, mark: int, limit: int) -> str:
        """What was written since `total` was `mark`, at most its last `limit` bytes, as text."""
        wanted = min(self.total - mark, limit, len(self.data))
        if wanted <= 0:
            return ""
        text = bytes(self.data[len(self.data) - wanted :]).decode("utf-8", "replace")
        return ("…" + text) if wanted < self.total - mark else text


class WorkerProcess:
    """A started worker: its process, socket, output pipe and status page."""

    def __init__(
        self,
        root: Path,
        env: Mapping[str, str],
        forkserver: ForkServer | None = None,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> None:
        """Start a worker: forked by `forkserver` when given (ZygoteError if it cannot, ForkCancelled when
        `cancelled()` says so while it waits), else a fresh one."""
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        log_read, log_write = os.pipe()
        status_fd = os.memfd_create("gpuemu-status") if hasattr(os, "memfd_create") else _temp_fd()
        os.ftruncate(status_fd, mmap.PAGESIZE)
        with contextlib.suppress(OSError):
            fcntl.fcntl(log_read, _F_SETPIPE_SZ, 1 << 20)  # fewer wake-ups for a chatty op
        self.proc: subprocess.Popen[bytes] | None = None
        self.forkserver = forkserver
        try:
            if forkserver is not None:
                self.pid = forkserver.fork((child_sock.fileno(), status_fd, log_write), cancelled)
            else:
                self.proc = self._spawn(root, env, child_sock.fileno(), status_fd, log_write)
                self.pid = self.proc.pid
        except BaseException:
            for fd in (log_read, log_write, status_fd):
                os.close(fd)
            parent_sock.close()
            raise
        finally:
            child_sock.close()
        os.close(log_write)
        self.sock = parent_sock
        self.sock.setblocking(False)
        os.set_blocking(log_read, False)
        self.log_fd = log_read
        self.log = LogTail()
        self.reader = FrameReader(REPLY_LIMIT)
        self.status = mmap.mmap(status_fd, mmap.PAGESIZE, prot=mmap.PROT_READ)
        os.close(status_fd)
        self.closed = False

    @staticmethod
    def _spawn(
        root: Path, env: Mapping[str, str], sock_fd: int, status_fd: int, log_fd: int
    ) -> subprocess.Popen[bytes]:
        command = [
            sys.executable, *PYTHON_FLAGS, "-m", "gpuemu_ci.backends.worker",
            str(sock_fd), str(status_fd), str(os.getpid()), "pdeathsig",
        ]  # fmt: skip
        try:
            return subprocess.Popen(
                command,
                pass_fds=(sock_fd, status_fd),
                cwd=root,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=log_fd,
                start_new_session=True,  # its own process group: a kill reaches what the user code spawned
            )
        except OSError as exc:
            raise InfraError(f"could not start a gpuemu worker process ({sys.executable}): {exc}") from None

    def send(self, message: object, fds: tuple[int, ...] = ()) -> None:
        """Send a request; OSError or TimeoutError when the worker is gone or does not read."""
        send_frame(self.sock, dumps_request(message), fds, timeout_s=SEND_TIMEOUT_S)

    def stage(self) -> Stage:
        """What the worker last said it was doing (its own word: for messages only)."""
        if self.closed:
            return Stage.IDLE
        try:
            return Stage(struct.unpack_from("<q", self.status, 0)[0])
        except ValueError:
            return Stage.IDLE

    def drain_log(self) -> None:
        """Read whatever the worker wrote (never blocks)."""
        if self.log_fd < 0:
            return
        while True:
            try:
                chunk = os.read(self.log_fd, 1 << 20)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                chunk = b""
            if not chunk:  # every writer is gone: nothing more will come
                os.close(self.log_fd)
                self.log_fd = -1
                return
            self.log.add(chunk)

    def returncode(self) -> int | None:
        """Its exit status once it has exited (negative: the signal that killed it), else None."""
        if self.proc is not None:
            return self.proc.poll()
        assert self.forkserver is not None
        self.forkserver.poll()
        return self.forkserver.wait(self.pid, 0.0)

    def wait(self, timeout_s: float) -> int | None:
        """Its exit status, waiting at most `timeout_s` for it to exit."""
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=timeout_s)
            return self.proc.poll()
        assert self.forkserver is not None
        return self.forkserver.wait(self.pid, timeout_s)

    def signal_group(self) -> None:
        """SIGKILL the process and everything in its process group, without waiting (also after a clean exit:
        children it left behind)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    def kill(self) -> int | None:
        """Kill the process and everything in its process group, now, whatever state it is in; reap it.
        Returns its exit status."""
        self.signal_group()
        return self.wait(10.0)

    def close(self) -> None:
        """Kill (if alive) and release the socket, pipe and status page. Idempotent."""
        if self.closed:
            return
        self.kill()
        self.drain_log()
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.close()
        if self.log_fd >= 0:
            os.close(self.log_fd)
            self.log_fd = -1
        with contextlib.suppress(BufferError, ValueError):
            self.status.close()


def _temp_fd() -> int:
    import tempfile

    fd, path = tempfile.mkstemp(prefix="gpuemu-status-")
    os.unlink(path)
    return fd
