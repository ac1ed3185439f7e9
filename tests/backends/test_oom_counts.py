"""The kernel's OOM-kill counters as the pool reads them at every side (backends/oom.py): the `oom_kill` line
and no other, in cgroup v2's memory.events, v1's memory.oom_control and /proc/vmstat alike."""

from __future__ import annotations

from pathlib import Path

from gpuemu_ci.backends.oom import OomRecord, _count


def test_the_oom_kill_line_is_read_and_its_lookalikes_are_not(tmp_path: Path) -> None:
    v2 = tmp_path / "memory.events"
    v2.write_text("low 0\nhigh 0\nmax 3\noom 4\noom_kill 2\noom_group_kill 7\n")
    v1 = tmp_path / "memory.oom_control"
    v1.write_text("oom_kill_disable 9\nunder_oom 0\noom_kill 5\n")
    first = tmp_path / "first"
    first.write_text("oom_kill 11")  # the first line, no newline at the end
    absent = tmp_path / "absent"
    absent.write_text("oom_kill_disable 1\nxoom_kill 3\n")
    assert (_count(v2), _count(v1), _count(first), _count(absent)) == (2, 5, 11, None)
    assert _count(tmp_path / "missing") is None
    (tmp_path / "garbled").write_text("oom_kill many\n")
    assert _count(tmp_path / "garbled") is None


def test_the_counts_now_match_the_kernels_files() -> None:
    vmstat = Path("/proc/vmstat")
    if not vmstat.is_file():
        return  # not Linux: nothing to read, OomRecord says None
    lines = dict(line.split(" ", 1) for line in vmstat.read_text().splitlines())
    expected = int(lines["oom_kill"]) if "oom_kill" in lines else None
    assert OomRecord.now().counts[0] == expected
