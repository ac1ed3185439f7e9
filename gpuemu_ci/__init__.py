"""gpuemu-ci: a correctness gate for GPU kernels."""

__version__ = "0.1.0"

__all__ = ["__version__"]
