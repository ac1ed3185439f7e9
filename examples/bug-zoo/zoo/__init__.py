"""Four realistic GPU-kernel bugs that a one-shape allclose test misses and gpuemu-ci's quick suite finds."""
