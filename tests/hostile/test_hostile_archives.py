"""Baseline artifacts built to hurt (issue #14, item 13): real zip archives served by the loopback GitHub API to
the real Action entrypoint, and unpacked by `safezip` in a process whose address space is capped.

Every one is refused with a message that says why, the gate still decides on its own results, and nothing is
decompressed past the caps: bzip2 and LZMA members are refused before a byte is inflated (zipfile inflates
them without an output limit), deflate is inflated a chunk at a time and stops at the cap, and an archive that
declares more entries than the cap is refused before zipfile builds an object per entry.
"""

from __future__ import annotations

import io
import struct
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.action.support_runner import pull_request_event, run_step, runner_env, write_tiny_project
from tests.github.support_fake_api import FakeGitHub

HEAD, BASE, MERGE = "7" * 40, "8" * 40, "9" * 40
GIB = 1 << 30


def _member(name: str, method: int, payload: bytes, size: int) -> tuple[bytes, bytes]:
    """(local header + data, central directory entry) of one member whose compressed bytes are `payload`."""
    encoded = name.encode()
    local = struct.pack(
        "<4s5H3L2H", b"PK\x03\x04", 20, 0, method, 0, 0, 0, len(payload), size, len(encoded), 0
    )
    central = struct.pack(
        "<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, method, 0, 0, 0, len(payload), size,
        len(encoded), 0, 0, 0, 0, 0, 0,
    )  # fmt: skip
    return local + encoded + payload, central + encoded


def _zip(members: list[tuple[str, int, bytes, int]]) -> bytes:
    """A zip written by hand, so that a member can use any compression method."""
    body, directory = b"", b""
    for name, method, payload, size in members:
        local, central = _member(name, method, payload, size)
        central = central[:42] + struct.pack("<L", len(body)) + central[46:]
        body += local
        directory += central
    end = struct.pack(
        "<4s4H2LH", b"PK\x05\x06", 0, 0, len(members), len(members), len(directory), len(body), 0
    )
    return body + directory + end


def _streamed(method: int, total: int) -> bytes:
    """A zip with one member of `total` zero bytes, compressed by zipfile itself as it streams."""
    buffer = io.BytesIO()
    with (
        zipfile.ZipFile(buffer, "w", compression=method) as archive,
        archive.open("baseline.json", "w") as member,
    ):
        chunk = b"\0" * (1 << 20)
        for _ in range(total // len(chunk)):
            member.write(chunk)
    return buffer.getvalue()


def _claiming_entries(count: int) -> bytes:
    """A one-member zip whose ZIP64 end records claim `count` entries."""
    plain = _zip([("baseline.json", zipfile.ZIP_STORED, b"{}", 2)])
    directory_size, directory_offset = struct.unpack_from("<2L", plain, len(plain) - 22 + 12)
    zip64_at = len(plain) - 22
    record = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, directory_size,
                         directory_offset)  # fmt: skip
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, zip64_at, 1)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, directory_size, directory_offset, 0)
    return plain[:-22] + record + locator + end


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    """Real archives, each under a megabyte, that unpack to hundreds of megabytes or more (or claim to hold a
    million entries)."""
    return {
        "bzip2, 1 GiB of zeros": _streamed(zipfile.ZIP_BZIP2, GIB),
        "LZMA, 256 MiB of zeros": _streamed(zipfile.ZIP_LZMA, 256 << 20),
        "deflate64 (method 9)": _zip([("baseline.json", 9, b"\0" * 64, 64)]),
        "deflate, 1 GiB of zeros": _streamed(zipfile.ZIP_DEFLATED, GIB),
        "a directory claiming a million entries": _claiming_entries(1_000_000),
    }


EXPECTED = {
    "bzip2, 1 GiB of zeros": "compression method 12",
    "LZMA, 256 MiB of zeros": "compression method 14",
    "deflate64 (method 9)": "compression method 9",
    "deflate, 1 GiB of zeros": "cap",
    "a directory claiming a million entries": "1,000,000 entries",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EXPECTED))
def test_a_hostile_baseline_artifact_is_refused_and_the_gate_decides(
    fake_github: FakeGitHub, bombs: dict[str, bytes], tmp_path: Path, name: str
) -> None:
    run = fake_github.add_run(event="push", head_branch="main", head_sha=BASE)
    fake_github.add_artifact(run, "gpuemu-baseline", zip_bytes=bombs[name])
    pr = fake_github.add_pull(head_sha=HEAD, base_sha=BASE)
    workspace = write_tiny_project(tmp_path / "ws")
    event = pull_request_event(fake_github, pr, head_sha=HEAD, base_sha=BASE)
    env = runner_env(fake_github, workspace, "pull_request", event, sha=MERGE, ref=f"refs/pull/{pr}/merge",
                     inputs={"mode": "gate", "baseline": "auto"})  # fmt: skip
    step = run_step(env)
    assert step.returncode == 0, step.describe()  # the run's own verdict: passed
    (warning,) = [m for m in step.messages("warning") if m.startswith("baseline")]
    assert EXPECTED[name] in warning and "could not be unpacked" in warning, warning
    assert "actions: read" not in warning
    assert step.results()["diff"]["status"] == "no_baseline"


EXTRACT = textwrap.dedent("""
    import resource, sys
    from pathlib import Path
    resource.setrlimit(resource.RLIMIT_AS, (600 << 20, 600 << 20))  # a bomb cannot be inflated in memory here
    from gpuemu_ci.github.safezip import ArtifactError, extract_zip_safely
    try:
        extract_zip_safely(Path(sys.argv[1]), Path(sys.argv[2]), max_total_bytes=100 << 20, max_file_bytes=50 << 20)
    except ArtifactError as exc:
        print("refused:", exc.message)
    # VmHWM is this program's own peak (ru_maxrss would keep the forking pytest process's, across exec).
    peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    print("peak RSS KiB:", peak.split()[1])
""")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EXPECTED))
def test_unpacking_stays_within_a_600_mib_address_space(
    bombs: dict[str, bytes], tmp_path: Path, name: str
) -> None:
    archive = tmp_path / "artifact.zip"
    archive.write_bytes(bombs[name])
    done = subprocess.run(
        [sys.executable, "-c", EXTRACT, str(archive), str(tmp_path / "out")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr  # no MemoryError, no crash
    refused, peak = done.stdout.splitlines()
    assert refused.startswith("refused:") and EXPECTED[name] in refused, refused
    assert int(peak.split(":")[1]) < 300 << 10  # KiB: well under what any of these unpacks to
    written = (
        sum(p.stat().st_size for p in (tmp_path / "out").rglob("*") if p.is_file())
        if (tmp_path / "out").exists()
        else 0
    )
    assert written <= 50 << 20  # the deflate bomb stopped at the per-file cap
