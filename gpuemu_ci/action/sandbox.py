"""Where the Action runs code under test (the setup step, the gate with its workers and hooks): in child
processes that cannot read the secrets the Action holds, cannot change anything the Action's own process
loads, and do not outlive the step.

The Action's own process (holding the token, in memory only: `secrets`) makes itself non-dumpable, so that
its `/proc/<pid>/{environ,mem,fd}` are readable only with CAP_SYS_PTRACE, and becomes the reaper of its
orphaned descendants. Children are started unprivileged, never as root when this process can help it:

- when the Action runs as root (a Docker action always does) and the workspace belongs to another user (the
  runner's, on GitHub's runners) who can write nothing this process has loaded, as that user: files they
  write belong to the workspace's owner;
- otherwise (a workspace owned by root: a self-hosted runner or a container job running as root), as the
  dedicated user `gpuemu-sandbox` (`sandbox_identity`), to whom only the output and cache directories are
  given. Root without capabilities is not enough: it still owns, and so can rewrite, gpuemu-ci's installed
  modules and the shared libraries this process has mapped;
- only when no unprivileged user can run the interpreter at all (one installed under a private home
  directory), as root *without capabilities* (empty bounding set, SECBIT_NOROOT), with a warning that says
  what that leaves open;
- when the Action itself is unprivileged, as the same user, which the non-dumpable parent already shuts out.

Every child also gets `no_new_privs`, so no setuid or file-capability binary gives a privilege back. After a
child is done, `reap_leftovers` kills whatever it left running (daemons, `Popen`s, double forks), so nothing
started by code under test is alive when the Action publishes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

from gpuemu_ci import early_signals
from gpuemu_ci.action import sandbox_identity
from gpuemu_ci.action.output_dir import lchown_tree

PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
# SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP | ..._LOCKED: uid 0 gains no capabilities on
# execve, and the bits cannot be cleared again (capabilities(7)).
SECUREBITS_NO_ROOT = 0x0F
CAP_SETPCAP = 8
CAP_SETUID = 7
CAP_SETGID = 6


class ChildMode(StrEnum):
    """How code under test is confined (see the module docstring)."""

    OTHER_USER = "other user"
    SANDBOX_USER = "sandbox user"
    ROOT_WITHOUT_CAPABILITIES = "root without capabilities"
    SAME_USER = "same user"


@dataclass(frozen=True)
class Confinement:
    """Who children run as; `weakness`: what this confinement leaves open, said as a warning (or empty)."""

    mode: ChildMode
    uid: int
    gid: int
    weakness: str = ""

    def describe(self) -> str:
        """Who code under test runs as, in words, for the step's log."""
        if self.mode is ChildMode.OTHER_USER:
            return f"uid {self.uid}, gid {self.gid}, without privileges"
        if self.mode is ChildMode.SANDBOX_USER:
            return f"the sandbox user (uid {self.uid}, gid {self.gid}), without privileges"
        if self.mode is ChildMode.ROOT_WITHOUT_CAPABILITIES:
            return "uid 0 without any capability"
        return f"uid {self.uid} (this process's own), without privileges"

    @property
    def switches_user(self) -> bool:
        """Whether code under test runs as another user than this process."""
        return self.mode in (ChildMode.OTHER_USER, ChildMode.SANDBOX_USER)

    def owns(self, path: Path) -> None:
        """Give `path` (a directory the children write) and everything in it to the children's user, when that
        is another one; symbolic links are changed themselves, never followed."""
        if self.switches_user and os.geteuid() == 0:
            lchown_tree(path, self.uid, self.gid)


@contextlib.contextmanager
def private_home(confinement: Confinement, env: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """`env` with HOME set to a fresh directory of the sandbox user's, who can write no other home (caches of
    pip, Triton and CUDA go there); removed afterwards. Other confinements keep the runner's HOME."""
    if confinement.mode is not ChildMode.SANDBOX_USER:
        yield dict(env)
        return
    home = Path(tempfile.mkdtemp(prefix="gpuemu-home-"))
    try:
        os.chown(home, confinement.uid, confinement.gid)
        yield {**env, "HOME": str(home)}
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int) -> None:
    if _libc().prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"prctl({option}): {os.strerror(error)}")


def _effective_capabilities() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return 0


def _last_capability() -> int:
    try:
        return int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        return 40


def harden_self() -> None:
    """Make this process's memory and environment unreadable to its children, and adopt their orphans."""
    if not sys.platform.startswith("linux"):
        return
    _prctl(PR_SET_DUMPABLE, 0)
    with contextlib.suppress(OSError):  # PID 1 in a container already reaps everything
        _prctl(PR_SET_CHILD_SUBREAPER, 1)


def confinement_for(workspace: Path, python: str = sys.executable) -> Confinement:
    """Who the children of an Action whose workspace is `workspace` run as (see the module docstring)."""
    caps = _effective_capabilities()
    if os.geteuid() == 0 and caps & (1 << CAP_SETUID) and caps & (1 << CAP_SETGID):
        owner = workspace.stat()
        usable = owner.st_uid != 0 and _usable(Path(python), workspace, owner.st_uid, owner.st_gid)
        if usable and sandbox_identity.first_writable(owner.st_uid, owner.st_gid) is None:
            return Confinement(ChildMode.OTHER_USER, owner.st_uid, owner.st_gid)
        uid, gid = sandbox_identity.dedicated_user()
        if _usable(Path(python), workspace, uid, gid):
            return Confinement(ChildMode.SANDBOX_USER, uid, gid)
        weakness = (
            f"no unprivileged user can run {python} or reach the workspace (a private home directory above "
            "them?), so the code under test runs as root without capabilities: it cannot read this "
            "process's token, but it can rewrite root's files, gpuemu-ci's installation included. Install "
            "Python where other users can run it (as the Action's image does)"
        )
        if caps & (1 << CAP_SETPCAP):
            return Confinement(ChildMode.ROOT_WITHOUT_CAPABILITIES, 0, os.getegid(), weakness)
    if os.geteuid() == 0 and caps & (1 << CAP_SETPCAP):
        return Confinement(
            ChildMode.ROOT_WITHOUT_CAPABILITIES, 0, os.getegid(), "runs as root without capabilities"
        )
    return Confinement(ChildMode.SAME_USER, os.geteuid(), os.getegid())


def _usable(python: Path, workspace: Path, uid: int, gid: int) -> bool:
    """Whether user `uid` can run `python` in `workspace`."""
    return sandbox_identity.can_execute(python, uid, gid) and sandbox_identity.can_enter(workspace, uid, gid)


def _drop_root_privileges() -> None:  # runs in the child between fork and exec
    _prctl(PR_SET_SECUREBITS, SECUREBITS_NO_ROOT)
    for cap in range(_last_capability() + 1):
        with contextlib.suppress(OSError):
            _prctl(PR_CAPBSET_DROP, cap)
    _prctl(PR_SET_NO_NEW_PRIVS, 1)


def _no_new_privileges() -> None:  # runs in the child between fork and exec
    _prctl(PR_SET_NO_NEW_PRIVS, 1)


def spawn(
    command: Sequence[str],
    confinement: Confinement,
    *,
    env: Mapping[str, str],
    cwd: Path,
    stdout: IO[Any] | int | None = None,
    stderr: IO[Any] | int | None = None,
) -> subprocess.Popen[bytes]:
    """Start `command` confined, in a session of its own, with no stdin."""
    linux = sys.platform.startswith("linux")
    kwargs: dict[str, Any] = {}
    preexec: Callable[[], None] | None = None
    if confinement.switches_user:
        kwargs.update(user=confinement.uid, group=confinement.gid, extra_groups=[])
        preexec = _no_new_privileges if linux else None
    elif confinement.mode is ChildMode.ROOT_WITHOUT_CAPABILITIES:
        kwargs.update(extra_groups=[])
        preexec = _drop_root_privileges if linux else None
    elif linux:
        preexec = _no_new_privileges
    return subprocess.Popen(
        list(command),
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,
        preexec_fn=preexec,  # the Action's process is single-threaded when it spawns
        **kwargs,
    )


class ForwardedSignals:
    """SIGTERM and SIGINT passed on to a child (the runner stops a step with SIGTERM; as PID 1 this process would
    otherwise ignore it), including one held back while this process started (early_signals.py)."""

    def __init__(self, child: subprocess.Popen[bytes]) -> None:
        self.child = child
        self.signal: int | None = None  # the first one passed on
        self._previous = {sig: signal.signal(sig, self._forward) for sig in (signal.SIGTERM, signal.SIGINT)}
        held = early_signals.take()
        if held is not None:
            self._forward(held, None)

    def _forward(self, signum: int, _frame: object) -> None:
        if self.signal is None:
            self.signal = signum
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.child.pid, signum)

    def restore(self) -> None:
        """The handlers from before."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")".
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[1] == str(pid):
            found.append(int(entry.name))
    return found


def reap_leftovers(*, timeout_s: float = 10.0) -> int:
    """Kill every remaining descendant of this process (orphans come back to it as their reaper) and reap it.
    Returns how many were killed."""
    if not Path("/proc/self/stat").exists():
        return 0
    me = os.getpid()
    killed: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        children = _children_of(me)
        if not children:
            break
        for pid in children:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        _reap_zombies()
        time.sleep(0.01)  # let the kernel reparent the orphans of the processes just killed
    _reap_zombies()
    return len(killed)


def _reap_zombies() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
