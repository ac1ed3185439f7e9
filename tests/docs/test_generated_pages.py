"""The committed generated pages match their sources (config/keys.py + the model, action.yml), and the
generator's command line behaves: --check reports stale pages with exit 1 and the command that fixes them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuemu_ci.docgen.pages import PAGES, REGENERATE, stale_pages

REPO = Path(__file__).resolve().parents[2]


def test_the_committed_generated_pages_are_current() -> None:
    stale = stale_pages(REPO, write=False)
    assert not stale, f"generated documentation is stale: {stale}; regenerate with `{REGENERATE}`"


def _docgen(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuemu_ci.docgen", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


def _copy_sources(tmp_path: Path) -> Path:
    for page in (*PAGES, "action.yml"):
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / page, tmp_path / page)
    return tmp_path


@pytest.mark.slow
def test_a_changed_action_yml_makes_check_fail_and_a_rerun_fixes_it(tmp_path: Path) -> None:
    repo = _copy_sources(tmp_path)
    action = repo / "action.yml"
    action.write_text(
        action.read_text(encoding="utf-8").replace("default: gpuemu-out", "default: elsewhere-out"),
        encoding="utf-8",
    )
    checked = _docgen("--check", "--repo", str(repo), cwd=REPO)
    assert checked.returncode == 1
    assert "stale: docs/action-reference.md" in checked.stdout and REGENERATE in checked.stderr
    assert _docgen("--repo", str(repo), cwd=REPO).returncode == 0
    assert "| `output_dir` | `elsewhere-out` |" in (repo / "docs/action-reference.md").read_text(
        encoding="utf-8"
    )
    assert _docgen("--check", "--repo", str(repo), cwd=REPO).returncode == 0


def test_a_page_without_its_generated_region_is_a_clear_error(tmp_path: Path) -> None:
    repo = _copy_sources(tmp_path)
    (repo / "docs/config.md").write_text("# edited by hand\n", encoding="utf-8")
    done = _docgen("--check", "--repo", str(repo), cwd=REPO)
    assert done.returncode == 2
    assert "docs/config.md: no generated region" in done.stderr and "Traceback" not in done.stderr


def test_outside_a_checkout_it_says_so(tmp_path: Path) -> None:
    done = _docgen("--check", "--repo", str(tmp_path), cwd=REPO)
    assert done.returncode == 2
    assert "not a gpuemu-ci checkout" in done.stderr and "Traceback" not in done.stderr


def test_the_config_reference_heads_each_table_once_as_toml_writes_it() -> None:
    """One section per TOML table, its heading as a user types the header: `[[ops]]` for an array of tables,
    `[ops.dims]` for a sub-table (it once read `[[ops]]]`, twice)."""
    from gpuemu_ci.config.keys import KEYS
    from gpuemu_ci.docgen.pages import config_reference

    headings = [line[5:-1] for line in config_reference(REPO).splitlines() if line.startswith("### `")]
    assert len(headings) == len(set(headings)), headings
    expected = {f"[{key.table}]" for key in KEYS}
    assert set(headings) == expected
    assert "[[ops]]" in headings and "[[kernels]]" in headings and "[ops.dims]" in headings
    assert not [h for h in headings if h.count("[") != h.count("]")]
