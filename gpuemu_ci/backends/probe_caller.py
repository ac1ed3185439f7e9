"""How an explain probe calls the op again (backends/explain_probes.py): `call(**settings)` runs it on the same
inputs with some `CallSettings` changed, as layer_probes.Caller does, and `report()` is what the layer saw in
that last call (its own findings: the first non-finite value, triton_cpu/nonfinite.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuemu_ci.calls import CallResult
from gpuemu_ci.triton_cpu.report import TritonReport


@dataclass(frozen=True)
class ProbeCaller:
    """The op called again with changed settings, and the layer's report of the last such call."""

    call: Callable[..., tuple[CallResult, bool]]
    report: Callable[[], TritonReport | None]

    def __call__(self, **settings: Any) -> tuple[CallResult, bool]:
        return self.call(**settings)
