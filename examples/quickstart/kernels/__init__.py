"""Example ops written the way GPU kernels are: tiles, masks, fp32 accumulators, explicit rounding points."""
