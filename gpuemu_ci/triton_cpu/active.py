"""The op call the layer is watching now: the one piece of mutable state that is global, and why.

Triton's interpreter calls the layer's hooks through its own class attributes and module globals
(`GridExecutor.__call__`, `InterpreterBuilder.create_masked_load`, `_patch_lang`, `tl.dot`, ...) with only its
own arguments, so a hook has no way to be handed the call it belongs to: it finds it here. Everything the hooks
then need (the launch, its batch of programs, the tracer, the caches) hangs off that `CallRecord` (call.py);
no other module of the layer keeps launch state of its own. Set and cleared only by `intercepted` (layer.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuemu_ci.triton_cpu.call import CallRecord, Launch
    from gpuemu_ci.triton_cpu.grid import Batch
    from gpuemu_ci.triton_cpu.tracer import Tracer


class _Running:
    """The holder of the running call (an object, so that `guard.py` records it and sees it replaced)."""

    call: CallRecord | None = None


RUNNING = _Running()


def call() -> CallRecord | None:
    """The op call being watched, None outside `intercepted`."""
    return RUNNING.call


def launch() -> Launch | None:
    """The launch running in the watched call, None between launches."""
    running = RUNNING.call
    return None if running is None else running.launch


def batch() -> Batch | None:
    """The programs a vectorised pass runs together (grid.py), None when the launch runs one at a time."""
    running = RUNNING.call
    if running is None or running.launch is None:
        return None
    return running.launch.batch


def tracer() -> Tracer | None:
    """The tracer recording the running vectorised pass (tracer.py), None when none is."""
    running = RUNNING.call
    if running is None or running.launch is None:
        return None
    return running.launch.tracer
