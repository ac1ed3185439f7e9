"""The error map image of a failing case (results/error_map.py): drawn with Pillow, decoded back here."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from gpuemu_ci.results import error_map
from gpuemu_ci.results.snapshots import clear_snapshots


def _red_columns(png: bytes) -> np.ndarray:
    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    red = (pixels[..., 0] > 150) & (pixels[..., 1] < 160) & (pixels[..., 2] < 130)
    return np.flatnonzero(red.any(axis=0))


def test_cells_over_the_allowance_are_red_and_only_there() -> None:
    ratio = np.full((16, 100), 0.01)
    ratio[:, 90:] = 50.0  # the last ten columns
    png = error_map.draw(ratio)
    assert png is not None and png.startswith(b"\x89PNG")
    # A panel of 100 columns 2 pixels each (PANEL_PIXELS // 100), 10 pixels from the left edge: red exactly
    # on the pixels of columns 90-99.
    assert _red_columns(png).tolist() == list(range(10 + 90 * 2, 10 + 100 * 2))


def test_a_large_output_is_pooled_to_the_worst_element_of_each_cell() -> None:
    ratio = np.zeros((1000, 1000))
    ratio[517, 3] = 9.0  # one bad element among a million
    stack, indices, step = error_map.panels(ratio)
    assert stack.shape[1] <= error_map.MAX_CELLS and stack.shape[2] <= error_map.MAX_CELLS
    assert step == (8, 8) and indices == [()]
    assert stack[0, 517 // 8, 0] == 9.0 and np.count_nonzero(stack > 1) == 1


def test_leading_dims_become_panels_the_worst_kept() -> None:
    ratio = np.zeros((40, 4, 4))
    ratio[33] = 7.0
    stack, indices, _ = error_map.panels(ratio)
    assert len(indices) == error_map.MAX_PANELS == stack.shape[0] and (33,) in indices
    assert indices == sorted(indices)


def test_the_map_is_written_beside_the_snapshots_and_cleared_with_them(tmp_path: Path) -> None:
    path, note = error_map.write_error_map(tmp_path, np.full((2, 3), 4.0), {-1: 2})
    assert note is None and path is not None and path.startswith("snapshots/") and path.endswith(".png")
    assert (tmp_path / path).read_bytes().startswith(b"\x89PNG")
    clear_snapshots(tmp_path)
    assert not (tmp_path / path).exists()


def test_without_pillow_nothing_is_drawn_and_the_failure_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "PIL", None)  # `import PIL` raises ImportError, as without the package
    path, note = error_map.write_error_map(tmp_path, np.full((2, 3), 4.0))
    assert path is None and note == error_map.PILLOW_MISSING
    assert "Pillow not installed" in note
