"""Verdicts unchanged (#50): the oracle computes, on a fixed grid of cases over every family, dtype, value kind
and error-model option, the same allowance bit for bit (forward and gradients) and the same verdict, figures and
message word for word as the oracle before its bound terms became a protocol with one list per family (the
golden, `allowance_golden.json`, was written by that code: tests/oracle/allowance_grid.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.oracle.allowance_grid import _floats, grid

GOLDEN = Path(__file__).with_name("allowance_golden.json")


def _same(golden: Any, now: Any) -> bool:
    """Equal, floats within 1e-12 relative (another machine's libm may round an exp in the last bit); the bit
    digests are compared by `python3 -m tests.oracle.allowance_grid --bits` on the machine that wrote them."""
    if isinstance(golden, dict) and isinstance(now, dict):
        return golden.keys() == now.keys() and all(_same(golden[k], now[k]) for k in golden if k != "bits")
    if isinstance(golden, list) and isinstance(now, list):
        return len(golden) == len(now) and all(_same(g, n) for g, n in zip(golden, now, strict=True))
    if isinstance(golden, float) and isinstance(now, float):
        return math.isclose(golden, now, rel_tol=1e-12, abs_tol=0.0)
    return bool(golden == now)


@pytest.mark.slow  # the whole grid: 0.8 s of CPU
def test_every_allowance_figure_and_message_of_the_grid_matches_the_golden():
    golden = json.loads(GOLDEN.read_text())
    now = json.loads(json.dumps(_floats(grid())))
    assert set(now) == set(golden)
    changed = sorted(key for key in golden if not _same(golden[key], now[key]))
    assert not changed, f"{len(changed)} of {len(golden)} cases changed, first: {changed[:5]}"
