"""How much a kernel metric may grow before it counts as a regression: `[policies]`, with optional
per-kernel overrides (`[policies.kernels."<name>"]`, where <name> is a [[kernels]] name or a kernel entry
name; a key that is absent inherits `[policies]`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gpuemu_ci.config.model import Policies

# policy key -> DeltaLimits field
POLICY_KEYS: dict[str, str] = {
    "max_register_increase": "registers",
    "max_spill_increase": "spills",
    "max_local_memory_increase": "local_memory",
    "max_shared_memory_increase": "shared_memory",
    "max_instruction_increase_pct": "instructions_pct",
}


@dataclass(frozen=True)
class DeltaLimits:
    """Largest allowed increase per metric: absolute for counts and bytes, percent for instructions."""

    registers: int
    spills: int
    local_memory: int
    shared_memory: int
    instructions_pct: float
    source: str = "[policies]"  # where the limits came from, for the messages

    def key_for(self, field_name: str) -> str:
        """The `[policies]` key that sets the limit held in field `field_name`, for the messages."""
        return next(k for k, v in POLICY_KEYS.items() if v == field_name)


def default_limits(policies: Policies) -> DeltaLimits:
    """The limits `[policies]` sets for every kernel (before any per-kernel override)."""
    return DeltaLimits(
        registers=policies.max_register_increase,
        spills=policies.max_spill_increase,
        local_memory=policies.max_local_memory_increase,
        shared_memory=policies.max_shared_memory_increase,
        instructions_pct=policies.max_instruction_increase_pct,
    )


def limits_for(policies: Policies, config_name: str, entry: str) -> DeltaLimits:
    """The limits for one kernel entry: an override for the entry name wins over one for the [[kernels]]
    name, which wins over [policies]."""
    limits = default_limits(policies)
    overrides = _overrides(policies)
    for name in (config_name, entry):  # later wins: the entry is more specific
        values = overrides.get(name)
        if values:
            limits = replace(limits, source=f"[policies.kernels.{name}]", **values)
    return limits


def _overrides(policies: Policies) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = {}
    for name, override in policies.kernel_overrides:
        chosen: dict[str, Any] = {}
        for key, field_name in POLICY_KEYS.items():
            value = getattr(override, key)
            if value is not None:
                chosen[field_name] = float(value) if field_name == "instructions_pct" else int(value)
        result[name] = chosen
    return result
