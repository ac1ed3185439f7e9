"""How an explain probe calls the op again (backends/explain_probes.py): `call(**settings)` runs it on the same
inputs with some `CallSettings` changed, as layer_probes.Caller does (a masked load's outputs with another
`other`, backends/masked_other.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuemu_ci.calls import CallResult


@dataclass(frozen=True)
class ProbeCaller:
    """The op called again with changed settings."""

    call: Callable[..., tuple[CallResult, bool]]

    def __call__(self, **settings: Any) -> tuple[CallResult, bool]:
        return self.call(**settings)
