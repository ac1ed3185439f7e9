"""Kernels of the gpuemu-ci bug corpus, written the way GPU kernels are: tiles, masks, fp32 accumulators and
explicit rounding points. Each op has a correct control, hard negatives (correct, but ordered or blocked
differently) and buggy variants, one per bug class of bench/corpus_score.py's BUG_CLASSES."""
