"""The error maps of a results document's failures (results/error_map.py) as the HTML report shows them: each
PNG read from beside results.json and inlined as a data: URI (the report is one self-contained file), or why it
cannot be shown."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gpuemu_ci.errors import UsageError
from gpuemu_ci.files import read_bounded
from gpuemu_ci.results.model import Failure

MAX_MAP_BYTES = 8 << 20  # a map is a few kilobytes to a few hundred; anything this large is not one of ours
_PNG = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class Shown:
    """A failure's error map for the report: its data: URI, or why there is none."""

    uri: str | None = None
    note: str | None = None


def error_map_line(failure: Failure) -> str | None:
    """The error map in one line of text: its path beside results.json, or why it was not drawn."""
    if failure.error_map:
        return f"error map {failure.error_map}"
    return failure.error_map_note


def shown_maps(failures: Iterable[Failure], results_dir: Path | None) -> dict[str, Shown]:
    """Per failure (by case id) with an error map or a note: what the HTML report shows."""
    shown: dict[str, Shown] = {}
    for failure in failures:
        if failure.error_map is None:
            if failure.error_map_note:
                shown[failure.case_id] = Shown(note=failure.error_map_note)
            continue
        if results_dir is None:
            shown[failure.case_id] = Shown(note=f"error map {failure.error_map} (beside results.json)")
            continue
        try:
            data = read_bounded(results_dir / failure.error_map, "the error map", MAX_MAP_BYTES)
        except UsageError:
            shown[failure.case_id] = Shown(
                note=f"error map {failure.error_map} not found beside results.json"
            )
            continue
        if not data.startswith(_PNG):
            shown[failure.case_id] = Shown(note=f"error map {failure.error_map} is not a PNG: not shown")
            continue
        shown[failure.case_id] = Shown(uri="data:image/png;base64," + base64.b64encode(data).decode("ascii"))
    return shown
