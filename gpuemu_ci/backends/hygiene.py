"""Process state that user code can change and that would leak into the next case of the same worker.

Workers are reused across cases and ops, so an op that calls `np.seterr(all="raise")`, arms a signal timer,
changes the floating-point rounding mode or flush-to-zero bits, installs a signal handler, edits os.environ
or the warnings filters, or changes directory, would change the verdict of whatever runs next in
that worker, and with several workers the next op depends on scheduling. `Baseline` records the state once,
when the worker starts, and `restore` puts it back before every case.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

_TIMERS = tuple(
    getattr(signal, name)
    for name in ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF")
    if hasattr(signal, name)
)
_SKIP_SIGNALS = {signal.SIGKILL, signal.SIGSTOP}
# The C module's getsignal skips the enum conversions that make signal.getsignal slow (before every case).
_getsignal: Callable[[int], Any] = getattr(signal, "_signal", signal).getsignal


def _libm() -> Any:
    for name in (ctypes.util.find_library("m"), None):
        with contextlib.suppress(OSError):
            lib = ctypes.CDLL(name)
            if hasattr(lib, "fesetenv") and hasattr(lib, "fegetenv"):
                return lib
    return None


def _environ_data() -> dict[bytes, bytes]:
    """os.environ's encoded items, compared without decoding every entry."""
    return getattr(os.environb, "_data", None) or {
        os.fsencode(k): os.fsencode(v) for k, v in os.environ.items()
    }


@dataclass
class Baseline:
    """The worker's state before any user code ran."""

    errstate: dict[str, str] = field(default_factory=dict)
    errcall: Any = None
    handlers: dict[int, Any] = field(default_factory=dict)
    environ: dict[bytes, bytes] = field(default_factory=dict)
    cwd: str = ""
    warning_filters: list[Any] = field(default_factory=list)
    umask: int = 0o022
    fenv: Any = None
    libm: Any = None

    @classmethod
    def capture(cls) -> Baseline:
        """The worker's state now, before any user code runs: what each later case's state is compared with
        and restored to."""
        handlers = {}
        for sig in signal.valid_signals():
            if sig in _SKIP_SIGNALS:
                continue
            with contextlib.suppress(OSError, ValueError, TypeError):
                handlers[int(sig)] = _getsignal(sig)
        umask = os.umask(0o022)
        os.umask(umask)
        libm = _libm()
        fenv = None
        if libm is not None:
            fenv = ctypes.create_string_buffer(512)  # larger than any fenv_t
            if libm.fegetenv(fenv) != 0:
                fenv = None
        return cls(
            errstate={k: str(v) for k, v in np.geterr().items()},
            errcall=np.geterrcall(),
            handlers=handlers,
            environ=dict(_environ_data()),
            cwd=os.getcwd(),
            warning_filters=list(warnings.filters),
            umask=umask,
            fenv=fenv,
            libm=libm,
        )

    def restore(self) -> None:
        """Put the recorded state back (each part on its own: one that fails does not stop the others)."""
        for timer in _TIMERS:
            with contextlib.suppress(OSError, ValueError):
                signal.setitimer(timer, 0.0)
        with contextlib.suppress(OSError, ValueError):
            signal.alarm(0)
        getsignal = _getsignal
        for sig, handler in [(s, h) for s, h in self.handlers.items() if getsignal(s) is not h]:
            with contextlib.suppress(OSError, ValueError, TypeError):
                signal.signal(sig, handler)
        with contextlib.suppress(Exception):
            np.seterr(**self.errstate)  # type: ignore[arg-type]
            np.seterrcall(self.errcall)
        if self.fenv is not None and self.libm is not None:
            with contextlib.suppress(Exception):
                self.libm.fesetenv(self.fenv)  # rounding mode, exception masks, flush-to-zero (x86 MXCSR)
        if _environ_data() != self.environ:
            os.environ.clear()
            for key, value in self.environ.items():
                os.environb[key] = value
        with contextlib.suppress(OSError):
            if os.getcwd() != self.cwd:
                os.chdir(self.cwd)
        if warnings.filters != self.warning_filters:
            warnings.filters[:] = self.warning_filters  # type: ignore[index]
            with contextlib.suppress(AttributeError):
                warnings._filters_mutated()  # type: ignore[attr-defined]  # drops the cached decisions
        os.umask(self.umask)
