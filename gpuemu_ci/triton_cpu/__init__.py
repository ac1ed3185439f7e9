"""Triton kernels on a CPU, run as a GPU would run them (as far as a CPU can tell): one interception layer
over Triton's interpreter (layer.py) with bounds checks (memory.py), races between programs, poisoned masked
lanes and TF32 dots (numerics.py), and the interpreter's `and`/`or` fault fixed (boolops.py)."""
