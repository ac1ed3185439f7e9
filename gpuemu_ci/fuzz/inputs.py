"""The one way a case's inputs are made, from its seed or from the snapshot that pins it, and the digest that
proves two processes made the same ones.

Every process that needs a case's inputs calls `case_inputs`: the op's worker and the judge's
(backends/op_side.py, backends/judge_side.py), and through them replay, minimize, shadow captures and corpus
cases. The op's side sends `inputs_digest` of
what it built with its outputs and the judge compares it with its own, so a case whose inputs depend on
anything but its seed (hash order, process state, time, the machine, a hook that draws its own randomness)
is caught as the tool's error instead of becoming a verdict about inputs the op never saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gpuemu_ci.config.model import OpSpec
from gpuemu_ci.fuzz.case import CaseInputs, HookLoader, build_case
from gpuemu_ci.fuzz.digest import inputs_digest
from gpuemu_ci.fuzz.snapshot import case_from_snapshot


def case_inputs(
    op: OpSpec,
    seed: int,
    root: Path,
    load: HookLoader,
    *,
    dims: Mapping[str, int] | None = None,
    scale: float | None = None,
    snapshot: Path | None = None,
) -> CaseInputs:
    """The case's inputs: byte for byte what its seed gives on any machine and in any process (with the
    minimizer's `dims` and `scale` overrides), or exactly what `snapshot` holds. `load` imports the op's
    inputs hook (`pkg.mod:function`, relative to `root`). Raises CaseSkipped for a case this machine's memory
    cannot hold, InputsHookError when the hook fails, UsageError for a snapshot that does not fit the op."""
    if snapshot is not None:
        return case_from_snapshot(op, snapshot)
    return build_case(op, seed, root, dims_override=dims, value_scale=scale, load=load)


__all__ = ["case_inputs", "inputs_digest"]
