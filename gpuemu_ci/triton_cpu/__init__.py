"""Triton kernels on a CPU, run as a GPU would run them (as far as a CPU can tell), and fast: one interception
layer over Triton's interpreter (layer.py) with bounds checks (memory.py, provenance.py), races between
programs, poisoned masked lanes and TF32 dots (numerics.py), the interpreter's `and`/`or` fault fixed
(boolops.py), and every program of a launch run at once where it can (vectorised.py, grid.py)."""
