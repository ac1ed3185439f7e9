"""A full disk is the machine's fault, exit 3, in every command that writes a file (issue #52, item 5).

The disk is real: a small tmpfs mounted for the test and filled to the last byte, so every write there fails
with the kernel's own ENOSPC (creating an empty file still works, as on a full ext4 with inodes left). Before,
`render`, `sign`, `baseline create` and `keygen` called that a usage error (exit 2) where `run` said exit 3.
"""

from __future__ import annotations

import errno
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpuemu_ci.errors import ExitCode
from tests.support_cli import CliResult

NO_SPACE = "No space left on device"


@pytest.fixture
def full_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory on a 256 KiB tmpfs with no free space left."""
    mount_point = tmp_path / "full"
    mount_point.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("mount(8) is not installed")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        _fill(mount_point / "filler")
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill(path: Path) -> None:
    with path.open("wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc


def _says_no_space(result: CliResult, where: Path) -> None:
    assert result.exit_code == ExitCode.INFRASTRUCTURE, result
    assert NO_SPACE in result.stderr and str(where) in result.stderr, result.stderr


def test_render_on_a_full_disk_exits_3(full_dir: Path, workdir: Path, cli: Callable[..., CliResult]) -> None:
    out = full_dir / "comment.md"
    _says_no_space(cli("render", "comment", workdir / "results.json", "-o", out), out)
    assert not out.exists()


def test_sign_on_a_full_disk_exits_3(full_dir: Path, workdir: Path, cli: Callable[..., CliResult]) -> None:
    out = full_dir / "report.dsse.json"
    _says_no_space(cli("sign", workdir / "results.json", "--unsigned", "-o", out), out)


def test_baseline_create_on_a_full_disk_exits_3(
    full_dir: Path, workdir: Path, cli: Callable[..., CliResult]
) -> None:
    out = full_dir / "baseline.json"
    _says_no_space(cli("baseline", "create", "--from", workdir / "results.json", "-o", out), out)


def test_keygen_on_a_full_disk_exits_3(full_dir: Path, cli: Callable[..., CliResult]) -> None:
    out = full_dir / "signing.key"
    _says_no_space(cli("keygen", "-o", out), out)
    assert not out.exists()


def test_run_on_a_full_disk_exits_3(
    full_dir: Path, simple_project: Callable[..., Path], cli: Callable[..., CliResult]
) -> None:
    config = simple_project()
    out = full_dir / "gpuemu-out"
    result = cli("run", "--config", config, "--no-lint", "--out", out)
    assert result.exit_code == ExitCode.INFRASTRUCTURE, result
    assert NO_SPACE in result.stderr and "nothing was run" in result.stderr, result.stderr


def test_a_path_that_cannot_be_written_stays_a_usage_error(
    tmp_path: Path, workdir: Path, cli: Callable[..., CliResult]
) -> None:
    """The other half of the rule: the caller's path (here a directory that is a file) is exit 2."""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    for args in (
        ("render", "comment", workdir / "results.json", "-o", blocker / "comment.md"),
        ("sign", workdir / "results.json", "--unsigned", "-o", blocker / "report.json"),
        ("baseline", "create", "--from", workdir / "results.json", "-o", blocker / "baseline.json"),
    ):
        result = cli(*args)
        assert result.exit_code == ExitCode.USAGE, (args, result)
