"""The error map of a failing case: error / allowance per element of the output, drawn as a PNG beside the case's
input snapshot (snapshots/<hash>.png) and shown in the HTML report.

A heatmap of the output's last two dims, one panel per index of the dims before them (small multiples, at most
`MAX_PANELS`: those holding the worst elements); each panel max-pooled to at most `MAX_CELLS` cells a side, so a
cell shows the worst element it covers. Cells within the allowance are blue (darker is further within it), cells
over it red (darker is further over it, magenta where the non-finite class is wrong); green lines are the
kernel's tile boundaries where its block sizes along the last two dims are known.

Drawn with Pillow (the `maps` extra; the Action's image has it). Without it nothing is drawn and the failure says
so (`PILLOW_MISSING`): never an image silently left out.
"""

from __future__ import annotations

import hashlib
import io
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from gpuemu_ci.files import atomic_write

MAP_DIR = "snapshots"  # beside the input snapshots, so the artifact that carries those carries these
MAX_PANELS = 16
MAX_CELLS = 128  # a panel's cells a side, at most (max-pooled beyond)
PANEL_PIXELS = 256  # a panel's longer side, about
PILLOW_MISSING = "error map not drawn: Pillow not installed (pip install 'gpuemu-ci[maps]')"

_WITHIN_DECADES = 4.0  # ratios from 1e-4 to 1 shade from dark to light blue
_OVER_DECADES = 4.0  # ratios from 1 to 1e4 shade from light to dark red
_TILE = (0, 160, 0)
_TEXT = (20, 20, 20)


def panels(ratio: np.ndarray) -> tuple[np.ndarray, list[tuple[int, ...]], tuple[int, int]]:
    """(the panels as (k, rows, cols), the index of the leading dims of each, (rows, cols) per original
    cell of a pooled cell): the worst `MAX_PANELS` panels, in index order."""
    array = np.asarray(ratio, dtype=np.float64)
    if array.ndim == 0:
        array = array.reshape(1, 1)
    elif array.ndim == 1:
        array = array.reshape(1, -1)
    lead = array.shape[:-2]
    stack = array.reshape(-1, *array.shape[-2:])
    indices = [
        tuple(int(i) for i in np.unravel_index(k, lead)) if lead else () for k in range(stack.shape[0])
    ]
    if stack.shape[0] > MAX_PANELS:
        worst = np.nan_to_num(stack, nan=np.inf).reshape(stack.shape[0], -1).max(axis=1)
        keep = np.sort(np.argsort(-worst, kind="stable")[:MAX_PANELS])
        stack, indices = stack[keep], [indices[k] for k in keep]
    rows, cols = stack.shape[1:]
    step = (max(1, math.ceil(rows / MAX_CELLS)), max(1, math.ceil(cols / MAX_CELLS)))
    if step != (1, 1):
        padded_rows, padded_cols = -(-rows // step[0]) * step[0], -(-cols // step[1]) * step[1]
        padded = np.full((stack.shape[0], padded_rows, padded_cols), -np.inf)
        padded[:, :rows, :cols] = stack
        stack = padded.reshape(
            stack.shape[0], padded_rows // step[0], step[0], padded_cols // step[1], step[1]
        ).max(axis=(2, 4))
    return stack, indices, step


def colours(panel: np.ndarray) -> np.ndarray:
    """RGB (uint8) per cell of a panel of ratios."""
    with np.errstate(divide="ignore", invalid="ignore"):
        decades = np.log10(np.where(panel > 0, panel, 1e-300))
    within = np.clip(1.0 + decades / _WITHIN_DECADES, 0.0, 1.0)  # 0 far within, 1 at the allowance
    over = np.clip(decades / _OVER_DECADES, 0.0, 1.0)  # 0 at the allowance, 1 far over
    rgb = np.empty((*panel.shape, 3), dtype=np.float64)
    rgb[..., 0] = 40 + 160 * within
    rgb[..., 1] = 70 + 150 * within
    rgb[..., 2] = 150 + 100 * within
    bad = panel > 1.0
    rgb[bad, 0] = 255 - 95 * over[bad]
    rgb[bad, 1] = 150 - 150 * over[bad]
    rgb[bad, 2] = 120 - 120 * over[bad]
    wrong_class = ~np.isfinite(panel) & (panel > 0) | np.isnan(panel)
    rgb[wrong_class] = (200, 0, 200)
    return rgb.astype(np.uint8)


def draw(ratio: np.ndarray, tiles: Mapping[int, int] | None = None) -> bytes | None:
    """The PNG of the error map, or None without Pillow. `tiles`: axis (-1 or -2) -> block size."""
    try:
        from PIL import Image, ImageDraw, ImageFont
    except ImportError:
        return None
    tiles = tiles or {}
    shape = np.shape(ratio)
    stack, indices, step = panels(ratio)
    rows, cols = stack.shape[1:]
    cell = max(1, min(16, PANEL_PIXELS // max(rows, cols)))
    font = ImageFont.load_default()
    label_h, gap, header_h = 14, 10, 44
    width, height = cols * cell, rows * cell
    per_row = min(len(indices), max(1, 1024 // (width + gap)))
    grid_rows = -(-len(indices) // per_row)
    image_w = max(per_row * (width + gap) + gap, 420)
    image_h = header_h + grid_rows * (height + label_h + gap) + gap
    image = Image.new("RGB", (image_w, image_h), (255, 255, 255))
    pen = ImageDraw.Draw(image)
    over = int(np.count_nonzero(np.asarray(ratio) > 1.0))
    pen.text((gap, 4), f"error / allowance per element, output shape {tuple(shape)}", fill=_TEXT, font=font)
    pooled = f"; each cell the worst of {step[0]}x{step[1]}" if step != (1, 1) else ""
    pen.text((gap, 18), f"red: over the allowance ({over} elements){pooled}", fill=_TEXT, font=font)
    tiled = " x ".join(f"{tiles[a]}" for a in (-2, -1) if a in tiles)
    shown = f"; {len(indices)} of {int(np.prod(shape[:-2]))} panels" if len(shape) > 2 else ""
    pen.text(
        (gap, 30),
        (f"green: tiles of {tiled}" if tiled else "tiles: not known") + shown,
        fill=_TEXT,
        font=font,
    )
    for k, index in enumerate(indices):
        x0 = gap + (k % per_row) * (width + gap)
        y0 = header_h + (k // per_row) * (height + label_h + gap)
        pen.text((x0, y0), f"[{', '.join(map(str, index))}, :, :]" if index else "", fill=_TEXT, font=font)
        top = y0 + label_h
        panel = Image.fromarray(colours(stack[k]), "RGB").resize((width, height), Image.Resampling.NEAREST)
        image.paste(panel, (x0, top))
        for axis, size in tiles.items():
            if axis not in (-1, -2) or size <= 0:
                continue
            extent = shape[axis] if len(shape) >= -axis else 1
            for boundary in range(size, extent, size):
                at = round(boundary / step[axis] * cell)
                if axis == -1:
                    pen.line([(x0 + at, top), (x0 + at, top + height - 1)], fill=_TILE)
                else:
                    pen.line([(x0, top + at), (x0 + width - 1, top + at)], fill=_TILE)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=False)
    return buffer.getvalue()


def write_error_map(
    out_dir: Path, ratio: np.ndarray, tiles: Mapping[int, int] | None = None
) -> tuple[str | None, str | None]:
    """(the map's path under `out_dir`, None), or (None, why it was not drawn or written). Named by the hash of
    its content, like the snapshots."""
    data = draw(ratio, tiles)
    if data is None:
        return None, PILLOW_MISSING
    relative = f"{MAP_DIR}/{hashlib.sha256(data).hexdigest()[:16]}.png"
    try:
        atomic_write(out_dir / relative, data)
    except OSError as exc:
        return None, f"error map not written: {exc.strerror or exc}"
    return relative, None
