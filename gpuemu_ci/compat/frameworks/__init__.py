"""Upstream's `gpuemu.frameworks`: `pytorch.validate_pytorch`."""
