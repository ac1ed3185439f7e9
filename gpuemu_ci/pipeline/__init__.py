"""The pipeline: config -> plan -> fuzz -> backends -> oracle -> lint -> results document."""

from gpuemu_ci.pipeline.run import RunOptions, decide, run_pipeline

__all__ = ["RunOptions", "decide", "run_pipeline"]
