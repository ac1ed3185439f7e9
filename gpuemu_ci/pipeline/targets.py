"""OpSpec -> the CallTargets the backends run.

The op is always run by the gate: a "pkg.mod:func", upstream's dotted `module` (the function named like the op
in it), or an `op_script`. `execution_mode` says how the reference runs: in the judge worker (no mode, or
`client_side`), or as a subprocess speaking upstream's JSON protocol (`script_based`: warm when the script can
be imported, else one process per case; `daemon_orchestrated`: always one warm process)."""

from __future__ import annotations

from pathlib import Path

from gpuemu_ci.backends.interface import CallTarget, TargetKind
from gpuemu_ci.config.infer_inputs import defines_function
from gpuemu_ci.config.model import ExecutionMode, Framework, OpSpec

PROTOCOL_MODES = (ExecutionMode.SCRIPT, ExecutionMode.DAEMON)
OP_SCRIPT_FUNCTIONS = ("run", "op")  # an op script that defines one is imported and called in the worker


def _is_callable(spec: str) -> bool:
    return ":" in spec and not spec.endswith(".py") and "/" not in spec.split(":")[0]


def _is_script(spec: str) -> bool:
    return spec.endswith(".py") or "/" in spec


def op_target(op: OpSpec, root: Path) -> CallTarget:
    """How the worker calls the op: its declared callable, op script or protocol mode, resolved against the
    project root `root`."""
    framework = op.targets.framework
    script = op.targets.op_script
    if script:
        if _is_callable(script):
            return CallTarget(TargetKind.CALLABLE, script, root, framework)
        if any(defines_function(root / script, name) for name in OP_SCRIPT_FUNCTIONS):
            return CallTarget(TargetKind.OP_SCRIPT, script, root, framework)
        # A script written for upstream's daemon: stdin JSON in, stdout JSON out, NumPy arrays.
        return _protocol_target(script, root, "reference")
    if op.targets.op and not _is_callable(op.targets.op) and not _is_script(op.targets.op):
        return CallTarget(TargetKind.MODULE, op.targets.op, root, framework, function=op.name)
    return CallTarget(TargetKind.CALLABLE, op.targets.op, root, framework)


def reference_target(op: OpSpec, root: Path) -> CallTarget:
    """How the worker calls the reference: a callable or a reference script, always given NumPy float64 arrays
    (or the protocol target in upstream's protocol modes)."""
    # The reference always receives NumPy float64 arrays, whatever the op's framework.
    spec = op.targets.reference
    if op.targets.execution_mode in PROTOCOL_MODES:
        return _protocol_target(spec, root, "reference")
    kind = TargetKind.CALLABLE if _is_callable(spec) else TargetKind.REFERENCE_SCRIPT
    return CallTarget(kind, spec, root, Framework.NUMPY)


def _protocol_target(spec: str, root: Path, function: str) -> CallTarget:
    warm = _is_callable(spec) or defines_function(root / spec.partition(":")[0], function)
    return CallTarget(
        TargetKind.SCRIPT_PROCESS,
        spec,
        root,
        Framework.NUMPY,
        function="" if _is_callable(spec) else function,
        warm=warm,
    )


def naive_target(op: OpSpec, root: Path) -> CallTarget | None:
    """How the worker calls the op's naive version, or None when the op declares none."""
    if not op.targets.naive:
        return None
    kind = TargetKind.CALLABLE if _is_callable(op.targets.naive) else TargetKind.OP_SCRIPT
    return CallTarget(kind, op.targets.naive, root, op.targets.framework)
