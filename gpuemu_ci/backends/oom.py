"""Whether the kernel's out-of-memory killer sent a SIGKILL: its own records, read before and after a side.

A worker killed by SIGKILL may have been killed by the OOM killer, by a person, by a CI runner stopping the
job, or by another program. Only the kernel knows, and it counts: `oom_kill` in the cgroup's memory.events
(cgroup v2) or memory.oom_control (v1), and system-wide in /proc/vmstat. A message says "out of memory" only
when one of these counts rose while the side ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _count(path: Path, key: str = "oom_kill") -> int | None:
    """The `key N` line's N in a kernel counter file, None when it cannot be read."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return None


def _cgroup_files() -> list[Path]:
    """This process's memory cgroup counter files (v2 and v1), those that exist."""
    found: list[Path] = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if controllers == "":
            found.append(CGROUP_ROOT / relative / "memory.events")
        elif "memory" in controllers.split(","):
            found.append(CGROUP_ROOT / "memory" / relative / "memory.oom_control")
    return [p for p in found if p.is_file()]


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
