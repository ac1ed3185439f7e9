"""files.read_beneath: what the Action reads where code under test could have written (issue 45, item 2) is
read without following any link, only as a regular file of an expected owner, within its size cap."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuemu_ci.files import NotBeneath, read_beneath


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "outside.txt").write_text("not yours")
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "file.json").write_text("{}")
    return root


def test_a_regular_file_below_the_root_is_read(tree: Path) -> None:
    assert read_beneath(tree, "sub/file.json", "document") == b"{}"
    assert read_beneath(tree, Path("sub") / "file.json", "document", owners={os.geteuid()}) == b"{}"


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda root: (root / "link.json").symlink_to(root.parent / "outside.txt"), "symbolic link"),
        (lambda root: (root / "via").symlink_to(root / "sub"), "symbolic link"),
        (lambda root: os.mkfifo(root / "link.json"), "not a regular file"),
        (lambda root: (root / "link.json").mkdir(), "not a regular file"),
    ],
    ids=["a link to a file outside", "a link to a directory on the way", "a FIFO", "a directory"],
)
def test_links_and_special_files_are_refused(tree: Path, make: object, says: str) -> None:
    make(tree)  # type: ignore[operator]
    relative = "via/file.json" if (tree / "via").exists() else "link.json"
    with pytest.raises(NotBeneath, match=says) as refused:
        read_beneath(tree, relative, "document")
    assert not refused.value.missing


def test_missing_outside_oversized_and_foreign_files_are_refused(tree: Path) -> None:
    with pytest.raises(NotBeneath, match="not found") as missing:
        read_beneath(tree, "sub/absent.json", "document")
    assert missing.value.missing
    for relative in ("../outside.txt", "/etc/passwd", ""):
        with pytest.raises(NotBeneath, match="not a path inside"):
            read_beneath(tree, relative, "document")
    with pytest.raises(NotBeneath, match="more than the 1 read at most"):
        read_beneath(tree, "sub/file.json", "document", limit=1)
    with pytest.raises(NotBeneath, match=f"belongs to uid {os.geteuid()}"):
        read_beneath(tree, "sub/file.json", "document", owners={os.geteuid() + 1})
