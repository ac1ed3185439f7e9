"""Triton kernels on a CPU, run as a GPU would run them (as far as a CPU can tell), and fast: one interception
layer over Triton's interpreter (layer.py) with bounds checks (memory.py, provenance.py), races between
programs, masked lanes read as the GPU reads them and TF32 dots (numerics.py), bfloat16 and fp8 as real
numbers rounded as the GPU rounds them (lowp.py, lowp_builder.py), the interpreter's `and`/`or` fault fixed
(boolops.py), every launch path a library uses (autotune.py, imported.py), the layer's own errors told from
the kernel's (internal.py), a guard against ops that switch it off (guard.py), and every program of a launch
run at once where it can (vectorised.py, grid.py)."""
