"""A fork server for worker processes: one fresh interpreter imports what a worker needs, then forks workers.

Starting a worker as a fresh interpreter costs 0.15 to 0.3 s of CPU (Python, NumPy, gpuemu-ci's modules),
as much as the whole quick suite's op calls; a pool of three would spend a core-second before its first case.
The zygote pays that once: it is started like a worker (a fresh interpreter, in the pool's environment, never
a fork of the gate), imports the worker's modules, runs no user code and no thread, and on request forks a
child that becomes a worker (its own session, its stdout and stderr on the pipe the pool gave it) in a few
milliseconds, replacements after a crash included. The zygote reaps its children and tells the pool how each
ended. Where fork is unavailable (not Linux) or the zygote cannot start, the pool starts workers one by one.

Requests (pool -> zygote): a frame b"fork" with three descriptors (the worker's socket, its status page, its
output pipe). Replies (zygote -> pool): msgpack ["forked", pid] and ["exited", pid, wait status].
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import msgspec

from gpuemu_ci.backends.channel import FrameError, FrameReader, recv_frame, send_frame
from gpuemu_ci.launch import PYTHON_FLAGS

FORK_TIMEOUT_S = 120.0  # the first fork waits for the zygote's imports
CANCEL_POLL_S = 0.05  # how often a waiting fork looks whether the pool stopped


class ZygoteError(Exception):
    """The zygote cannot fork (it did not start, or died): start workers the plain way."""


class ForkCancelled(Exception):
    """The pool stopped while it waited for a fork (a signal stops a run at once, the zygote's imports too)."""


def available() -> bool:
    """Whether workers can be forked from a zygote here (Linux with fork)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork")


class ForkServer:
    """The pool's side: start the zygote, ask it for workers, learn how they ended."""

    def __init__(self, root: Path, env: Mapping[str, str]) -> None:
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        command = [
            sys.executable,
            *PYTHON_FLAGS,
            "-m",
            "gpuemu_ci.backends.zygote",
            str(child_sock.fileno()),
            str(os.getpid()),
        ]
        try:
            self.proc = subprocess.Popen(
                command,
                pass_fds=(child_sock.fileno(),),
                cwd=root,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            parent_sock.close()
            raise ZygoteError(f"could not start the zygote: {exc}") from None
        finally:
            child_sock.close()
        self.sock = parent_sock
        self.sock.setblocking(False)
        self.reader = FrameReader(1 << 16)
        self.exits: dict[int, int] = {}  # pid -> wait status, as the zygote reported it
        self.broken = False

    def fileno(self) -> int:
        """The control socket's descriptor, for select()."""
        return self.sock.fileno()

    def fork(self, fds: tuple[int, int, int], cancelled: Callable[[], bool] = lambda: False) -> int:
        """A new worker serving `fds` (socket, status page, output pipe); its pid. ZygoteError when the zygote
        cannot answer; ForkCancelled as soon as `cancelled()` says so (checked every CANCEL_POLL_S: the first
        fork waits for the zygote's imports, seconds on a busy machine)."""
        if self.broken:
            raise ZygoteError("the zygote is gone")
        try:
            send_frame(self.sock, b"fork", fds, timeout_s=FORK_TIMEOUT_S)
            deadline = time.monotonic() + FORK_TIMEOUT_S
            while True:
                if cancelled():
                    # The answer would come later and pair with no request: this zygote is done.
                    self.close()
                    raise ForkCancelled("the pool stopped")
                wait = min(CANCEL_POLL_S, max(0.0, deadline - time.monotonic()))
                for message in self._read(wait):
                    if message[0] == "forked":
                        return int(message[1])
                if time.monotonic() > deadline:
                    raise TimeoutError("the zygote did not answer")
        except (OSError, TimeoutError, EOFError, FrameError, msgspec.DecodeError, ValueError) as exc:
            self.broken = True
            raise ZygoteError(f"the zygote cannot fork: {exc}") from None

    def poll(self) -> None:
        """Read what the zygote said (exit statuses) without blocking."""
        if not self.broken:
            with contextlib.suppress(OSError, EOFError, FrameError, msgspec.DecodeError, ValueError):
                self._read(0.0)

    def wait(self, pid: int, timeout_s: float) -> int | None:
        """The worker's exit status (as Popen.returncode) once the zygote reported it, within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while pid not in self.exits and not self.broken:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            with contextlib.suppress(OSError, EOFError, FrameError, msgspec.DecodeError, ValueError):
                self._read(remaining)
        status = self.exits.get(pid)
        return None if status is None else os.waitstatus_to_exitcode(status)

    def _read(self, timeout_s: float) -> list[list[str | int]]:
        select.select([self.sock], [], [], timeout_s)
        frames, closed = self.reader.feed(self.sock)
        messages = [msgspec.msgpack.decode(frame, type=list[str | int]) for frame in frames]
        for message in messages:
            if len(message) == 3 and message[0] == "exited":
                self.exits[int(message[1])] = int(message[2])
        if closed:
            self.broken = True
            raise EOFError("the zygote exited")
        return messages

    def close(self) -> None:
        """Stop the zygote (its workers die with it: they asked the kernel to)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        with contextlib.suppress(OSError):
            self.sock.close()
        self.broken = True


# ---- the zygote process ----------------------------------------------------------------------------------


def _die_with(parent: int) -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def _child(fds: list[int], control: socket.socket, zygote: int) -> None:
    """In the forked child: become a worker and never return."""
    code = 1
    try:
        sock_fd, status_fd, log_fd = fds
        control.close()
        os.setsid()  # its own process group: killing it reaches whatever the user code starts
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sys.argv = ["gpuemu_ci.backends.worker", str(sock_fd), str(status_fd), str(zygote), "pdeathsig"]
        from gpuemu_ci.backends.worker import serve

        code = serve(sock_fd, status_fd, zygote, kernel_signal=True)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def _reap(control: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        send_frame(control, msgspec.msgpack.encode(["exited", pid, status]))


def main(argv: list[str] | None = None) -> int:
    """The zygote process: imports what every worker needs once, then forks a worker for each request on the
    control socket `args[0]`; it dies with its parent `args[1]`."""
    args = sys.argv[1:] if argv is None else argv
    fd, parent = int(args[0]), int(args[1])
    _die_with(parent)
    os.set_inheritable(fd, False)
    control = socket.socket(fileno=fd)
    import gpuemu_ci.backends.worker  # noqa: F401  # what every worker needs, imported once, here

    zygote = os.getpid()
    wake_r, wake_w = os.pipe()  # a child's exit wakes the loop at once: crashes are reported without delay
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    while True:
        ready, _, _ = select.select([control.fileno(), wake_r], [], [], 1.0)
        if wake_r in ready:
            os.read(wake_r, 4096)
        _reap(control)
        if os.getppid() != parent:
            return 0
        if control.fileno() not in ready:
            continue
        try:
            request, fds = recv_frame(control)
        except (EOFError, OSError):
            return 0
        if request != b"fork" or len(fds) != 3:
            for received in fds:
                os.close(received)
            continue
        pid = os.fork()
        if pid == 0:
            os.close(wake_r)
            os.close(wake_w)
            _child(fds, control, zygote)
        for received in fds:
            os.close(received)
        send_frame(control, msgspec.msgpack.encode(["forked", pid]))


if __name__ == "__main__":
    sys.exit(main())
