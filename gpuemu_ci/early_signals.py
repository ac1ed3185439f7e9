"""SIGINT and SIGTERM from the first moment of a `gpuemu-ci` process: while it imports (a second or more), a
signal is held back instead of printing a KeyboardInterrupt traceback or killing the process with nothing
written. The CLI then acts on it (`cli.main`): a run stops before its first case and writes a document saying
so (pipeline/interrupt.py takes the held signal over), any other command exits 130 or 143 at once.

Importing this module imports nothing else of gpuemu-ci's: the program entry points install it before they
import the CLI (`gpuemu_ci/__main__.py`, `cli/entry.py`, the Action's entrypoint.py)."""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# A signal held when the process re-executes itself (the Action's entrypoint does, to shed its secrets):
# handed to the new image, which would otherwise never hear of it.
CARRIED_VARIABLE = "GPUEMU_HELD_SIGNAL"
_held: list[int] = []
_installed = False


def _hold(signum: int, frame: FrameType | None) -> None:
    _held.append(signum)


def install() -> None:
    """Hold SIGINT and SIGTERM from now on (main thread only: signal handlers can only be set there)."""
    global _installed
    if threading.current_thread() is threading.main_thread():
        for sig in SIGNALS:
            signal.signal(sig, _hold)
        _installed = True
    carried = os.environ.pop(CARRIED_VARIABLE, "")
    if carried.isdigit() and int(carried) in SIGNALS:
        _held.append(int(carried))


def installed() -> bool:
    """Whether this process's entry point installed the holding handlers (not so when the CLI is called
    in-process, e.g. by tests)."""
    return _installed


def carry(env: dict[str, str]) -> None:
    """Put the first held signal (if any) into `env`, the environment of an `execve` of this program."""
    if _held:
        env[CARRIED_VARIABLE] = str(_held[0])


def pending() -> int | None:
    """The first signal held back, left held: a long wait (for GitHub's API) polls this to stop at once."""
    return _held[0] if _held else None


def take() -> int | None:
    """The first signal held back (and forget all of them), or None."""
    first = _held[0] if _held else None
    _held.clear()
    return first
