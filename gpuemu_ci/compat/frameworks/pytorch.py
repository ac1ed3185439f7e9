"""Upstream's `gpuemu.frameworks.pytorch.validate_pytorch`: validate_op for torch tensors (see validate.py)."""

from __future__ import annotations

from gpuemu_ci.compat.validate import validate_op as validate_pytorch

__all__ = ["validate_pytorch"]
