"""Configuration: gpuemu.toml -> a validated, frozen Config.

The loader is imported on first use: worker processes import config.model only, and need not pay for the TOML
parser and the op schema code at start-up.
"""

from __future__ import annotations

from typing import Any

from gpuemu_ci.config.model import Config, OpSpec

__all__ = ["Config", "OpSpec", "find_config", "load_config"]


def __getattr__(name: str) -> Any:
    if name in ("find_config", "load_config"):
        from gpuemu_ci.config import load

        return getattr(load, name)
    raise AttributeError(name)
