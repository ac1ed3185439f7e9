"""Whether the kernel's out-of-memory killer sent a SIGKILL: its own records, read before and after a side.

A worker killed by SIGKILL may have been killed by the OOM killer, by a person, by a CI runner stopping the
job, or by another program. Only the kernel knows, and it counts: `oom_kill` in the cgroup's memory.events
(cgroup v2) or memory.oom_control (v1), and system-wide in /proc/vmstat. A message says "out of memory" only
when one of these counts rose while the side ran.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _count(path: Path, key: str = "oom_kill") -> int | None:
    """The `key N` line's N in a kernel counter file, None when it cannot be read. Read as bytes and searched,
    not split into lines: the pool reads these at every side it starts (/proc/vmstat has some 180 lines)."""
    try:
        text = b"\n" + path.read_bytes()
        start = text.find(b"\n" + key.encode() + b" ")
        if start < 0:
            return None
        line = text[start + len(key) + 2 :].split(b"\n", 1)[0]
        return int(line)
    except (OSError, ValueError):
        return None


@functools.cache
def _cgroup_files() -> tuple[Path, ...]:
    """This process's memory cgroup counter files (v2 and v1), those that exist. Found once: a process's
    cgroup is where it was started, and the pool asks at every side."""
    found: list[Path] = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return ()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if controllers == "":
            found.append(CGROUP_ROOT / relative / "memory.events")
        elif "memory" in controllers.split(","):
            found.append(CGROUP_ROOT / "memory" / relative / "memory.oom_control")
    return tuple(p for p in found if p.is_file())


@dataclass(frozen=True)
class OomRecord:
    """The kernel's OOM-kill counts at one moment (None where a count cannot be read)."""

    counts: tuple[int | None, ...]

    @classmethod
    def now(cls) -> OomRecord:
        """The counts now, from /proc/vmstat and the cgroup's memory events."""
        files = [Path("/proc/vmstat"), *_cgroup_files()]
        return cls(tuple(_count(p) for p in files))

    def killed_since(self, earlier: OomRecord) -> bool | None:
        """True when the kernel recorded an OOM kill since `earlier`; False when its counts were readable and
        did not move; None when nothing could be read (not Linux, no /proc)."""
        pairs = [
            (a, b)
            for a, b in zip(earlier.counts, self.counts, strict=False)
            if a is not None and b is not None
        ]
        if not pairs:
            return None
        return any(b > a for a, b in pairs)
