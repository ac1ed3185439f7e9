"""The Triton example's kernels (rmsnorm.py) and their fp64 reference (reference.py)."""
