"""Upstream gpuemu's and cuda-kernel-verifier's Python API, on top of gpuemu-ci's gate.

The module tree mirrors upstream's, so a migration is one change per import line: `gpuemu` becomes
`gpuemu_ci.compat` (`from gpuemu_ci.compat import Client`, `from gpuemu_ci.compat.frameworks.pytorch import
validate_pytorch`, `from gpuemu_ci.compat.tolerances import calibrate_tolerance`, `from gpuemu_ci.compat.validate
import fuzz_shapes`), and `cuda_kernel_verifier` becomes `gpuemu_ci.compat.cuda_kernel_verifier`. There is no
top-level `gpuemu` package: it would overwrite upstream's (same import name) wherever both are installed.

What differs from upstream, and why, is in docs/migrating.md: no daemon (the client runs the gate in this
process's workers), ops come from gpuemu.toml (the schema, the reference and the error model), and verdicts are
gpuemu-ci's (the fp64 reference and the op family's error bound, or allclose where tolerances are given).
"""

from gpuemu_ci.compat.client import Client, FuzzFailure, FuzzResults
from gpuemu_ci.compat.single_call import ValidationError, ValidationResult
from gpuemu_ci.compat.tolerances import ToleranceResult, calibrate_tolerance
from gpuemu_ci.compat.validate import fuzz_dtypes, fuzz_layouts, fuzz_shapes, validate_op

__all__ = [
    "Client",
    "FuzzFailure",
    "FuzzResults",
    "ToleranceResult",
    "ValidationError",
    "ValidationResult",
    "calibrate_tolerance",
    "fuzz_dtypes",
    "fuzz_layouts",
    "fuzz_shapes",
    "validate_op",
]
