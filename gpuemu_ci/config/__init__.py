"""Configuration: gpuemu.toml -> a validated, frozen Config."""

from gpuemu_ci.config.load import find_config, load_config
from gpuemu_ci.config.model import Config, OpSpec

__all__ = ["Config", "OpSpec", "find_config", "load_config"]
