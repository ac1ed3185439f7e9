"""Kernels whose shapes need derived dims, dims bound to kwargs and constraints (see ../gpuemu.toml)."""
