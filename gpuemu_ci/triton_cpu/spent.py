"""Seconds the Triton layer spent preparing launches rather than running them: tracing a kernel's pass into a
tape (replay.py), and vectorised passes or replays it abandoned for one program at a time. A process-wide sum
the worker reads after each case (backends/phases.py); a clock reading only, never part of a verdict."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

_spent = [0.0]


def add(seconds: float) -> None:
    """Counts `seconds` measured elsewhere (a pass timed by its caller) as launch preparation."""
    _spent[0] += seconds


@contextmanager
def preparing() -> Iterator[None]:
    """Count the time of the block as launch preparation."""
    started = time.perf_counter()
    try:
        yield
    finally:
        add(time.perf_counter() - started)


def take() -> float:
    """The seconds counted since the last take()."""
    seconds, _spent[0] = _spent[0], 0.0
    return seconds
