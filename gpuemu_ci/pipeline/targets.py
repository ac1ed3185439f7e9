"""OpSpec -> the CallTargets the backends run."""

from __future__ import annotations

from pathlib import Path

from gpuemu_ci.backends.interface import CallTarget, TargetKind
from gpuemu_ci.config.model import ExecutionMode, Framework, OpSpec


def _is_callable(spec: str) -> bool:
    return ":" in spec and not spec.endswith(".py") and "/" not in spec.split(":")[0]


def op_target(op: OpSpec, root: Path) -> CallTarget:
    if op.targets.execution_mode is ExecutionMode.SCRIPT and op.targets.op_script:
        if _is_callable(op.targets.op_script):
            return CallTarget(TargetKind.CALLABLE, op.targets.op_script, root, op.targets.framework)
        return CallTarget(TargetKind.OP_SCRIPT, op.targets.op_script, root, op.targets.framework)
    return CallTarget(TargetKind.CALLABLE, op.targets.op, root, op.targets.framework)


def reference_target(op: OpSpec, root: Path) -> CallTarget:
    kind = TargetKind.CALLABLE if _is_callable(op.targets.reference) else TargetKind.REFERENCE_SCRIPT
    # The reference always receives NumPy float64 arrays, whatever the op's framework.
    return CallTarget(kind, op.targets.reference, root, Framework.NUMPY)


def naive_target(op: OpSpec, root: Path) -> CallTarget | None:
    if not op.targets.naive:
        return None
    kind = TargetKind.CALLABLE if _is_callable(op.targets.naive) else TargetKind.OP_SCRIPT
    return CallTarget(kind, op.targets.naive, root, op.targets.framework)
