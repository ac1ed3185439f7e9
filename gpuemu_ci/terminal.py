"""How output looks where it goes: colour on terminals (never in CI logs), honouring the NO_COLOR and FORCE_COLOR
conventions (https://no-color.org, https://force-color.org), and durations a person reads."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TextIO

# SGR codes per role: bold red for failures, green for passes, yellow for skips, magenta for errors.
_CODES = {"failed": "1;31", "passed": "32", "skipped": "33", "error": "35", "dim": "2", "bold": "1"}


@dataclass(frozen=True)
class Style:
    """Whether to colour, decided once per stream."""

    colour: bool

    @classmethod
    def for_stream(cls, stream: TextIO, env: Mapping[str, str] | None = None) -> Style:
        """NO_COLOR (any non-empty value) wins; then FORCE_COLOR (non-empty, not "0"); else a terminal."""
        env = os.environ if env is None else env
        if env.get("NO_COLOR"):
            return cls(False)
        force = env.get("FORCE_COLOR")
        if force:
            return cls(force != "0")
        isatty = getattr(stream, "isatty", None)
        return cls(bool(isatty and isatty()) and env.get("TERM") != "dumb")

    def paint(self, text: str, role: str) -> str:
        """`text` in the colour of `role` (passed, failed, skipped, error, dim, bold), or unchanged."""
        code = _CODES.get(role)
        return f"\x1b[{code}m{text}\x1b[0m" if self.colour and code else text


def duration(seconds: float) -> str:
    """45s, 3m05s, 1h02m."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
