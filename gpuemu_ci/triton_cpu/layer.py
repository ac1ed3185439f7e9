"""The one interception layer over Triton's CPU interpreter (TRITON_INTERPRET=1): its front door.

For the duration of an op call (`intercepted`), the interpreter's grid executor and a few of its builder's
methods are replaced, and restored afterwards. Each piece does one job:

- launch.py runs each launch: its programs in a permutation drawn from the case seed, every program at once
  where it can (vectorised.py, grid.py; later launches replay a traced tape: tracer.py, tape.py, replay.py),
  else one program at a time, with the same outputs and findings;
- builder_hooks.py intercepts the builder's loads, stores, atomics and dots: every active lane is checked
  before the access happens (accesses.py, memory.py; pointers keep the argument they were made from:
  provenance.py), an access outside the arguments stops the kernel with `KernelFault` as an `out_of_bounds`
  finding, a program that depends on another's writes in the same launch is a `race` finding; masked-off lanes
  of a load without `other` read 0, as NVIDIA's and AMD's lowering gives them (the sites are noted: Triton
  leaves those lanes undefined), or NaN/Inf and loud integers in the "poison" mode (numerics.py); bfloat16 and
  fp8 values are real numbers rounded as the GPU rounds them (lowp.py, lowp_builder.py); fp32 `tl.dot` runs at
  its `input_precision` (TF32 by default, as on the GPU) and the precisions used are reported;
- language.py makes the interpreter's patching of `triton.language` cheap and adds what the layer needs;
- this module installs the hooks on the interpreter (`on_import`), holds the call's record (call.py) as the
  running one (active.py) and checks afterwards that the op left it all in place (guard.py).

`boolops.install` (Python `and`/`or` on tensors) is not per call: it is a fix of the interpreter, installed
once when the interpreter module is imported (backends/triton_probe.py).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from gpuemu_ci.triton_cpu import (
    active,
    autotune,
    boolops,
    builder_hooks,
    guard,
    language,
    launch,
    lowp_builder,
    shadow_ops,
)
from gpuemu_ci.triton_cpu.call import POISON, ZERO, CallRecord, CallSettings, KernelFault, KernelMemory
from gpuemu_ci.triton_cpu.provenance import PROVENANCE, derived
from gpuemu_ci.triton_cpu.report import TAMPERED
from gpuemu_ci.triton_cpu.shadow import ShadowRun

# The layer's entry points, imported by the op side (backends/) from here.
__all__ = [
    "POISON",
    "ZERO",
    "CallSettings",
    "KernelFault",
    "intercepted",
    "on_import",
    "set_vectorise",
    "unsupported",
]

MODULE = "triton.runtime.interpreter"
Wrap = Callable[[Any], Any]


class _Process:
    """What this process keeps between op calls: the default of `CallSettings.vectorise`, and what it learned
    about kernels (a cache: tapes, kernels that cannot vectorise)."""

    vectorise = True
    kernels = KernelMemory()


PROCESS = _Process()


def set_vectorise(enabled: bool) -> None:
    """The default of `CallSettings.vectorise` in this process (the bitwise comparison turns it off)."""
    PROCESS.vectorise = enabled


# What the layer relies on in triton/runtime/interpreter.py (Triton 3.x); another layout is not patched.
_NEEDED = {
    "": ("GridExecutor", "InterpreterBuilder", "TensorHandle", "InterpreterError", "interpreter_builder",
         "_patch_lang", "_implicit_cvt", "_get_np_dtype", "_interpreter"),
    "GridExecutor": ("__call__", "_init_args_hst", "_restore_args_dev"),
    "InterpreterBuilder": ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas",
                           "create_dot", "set_grid_idx", "set_grid_dim"),
}  # fmt: skip


def unsupported(module: ModuleType) -> str:
    """Why the layer cannot patch this interpreter ("" when it can)."""
    for owner_name, names in _NEEDED.items():
        owner = getattr(module, owner_name) if owner_name else module
        missing = [n for n in names if not hasattr(owner, n)]
        if missing:
            where = f"{owner_name}." if owner_name else ""
            return (
                f"this Triton's interpreter has no {', '.join(where + m for m in missing)}: its kernels ran "
                "in the plain interpreter, without the GPU-faithful checks"
            )
    return ""


def _hooks(module: ModuleType) -> list[tuple[Any, str, Wrap]]:
    """(owner, name, wrap) for every hook the layer sets on this interpreter."""
    executor = module.GridExecutor
    builder = module.InterpreterBuilder
    replaced: list[tuple[Any, str, Wrap]] = [
        (executor, "__call__", launch.run_grid),
        (builder, "create_masked_load", builder_hooks.masked_load),
        (builder, "create_masked_store", builder_hooks.masked_store),
        (builder, "create_atomic_rmw", builder_hooks.atomic_rmw),
        (builder, "create_atomic_cas", builder_hooks.atomic_cas),
        (builder, "create_dot", builder_hooks.dot),
    ]
    replaced.extend((builder, name, derived) for name in PROVENANCE if name in builder.__dict__)
    if "_patch_lang" in module.__dict__ and "_LangPatchScope" in module.__dict__:
        replaced.append((module, "_patch_lang", language.replayed_patch_lang))
    replaced.extend(
        (owner, name, builder_hooks.modelled(wrap)) for owner, name, wrap in lowp_builder.replaced(module)
    )
    gaps = {
        "create_inline_asm": builder_hooks.inline_asm_gap,
        "create_extern_elementwise": builder_hooks.extern_gap,
        "create_dot_scaled": builder_hooks.dot_scaled_gap,
    }
    replaced.extend((builder, name, wrap) for name, wrap in gaps.items() if name in builder.__dict__)
    replaced.extend(autotune.replaced(_autotune_draw))
    return replaced


def _patch(call: CallRecord, module: ModuleType) -> None:
    """Set the hooks on the interpreter for the call (noting why not, where this interpreter cannot take them)."""
    reason = unsupported(module)
    if reason:
        call.unsupported = reason
        return
    hooks = _hooks(module)
    if call.shadow is not None:  # around the layer's own hooks: the shadow sees what the kernel got
        hooks.extend(shadow_ops.replaced(module))
    for owner, name, wrap in hooks:
        original = owner.__dict__[name]
        wrapper = wrap(original)
        setattr(owner, name, wrapper)
        call.restore.append((owner, name, original))
        call.installed.append((owner, name, wrapper))
    call.patches += 1


def _autotune_draw() -> int:
    """Which config an autotuned launch runs: from the case seed and the launch's place in the call."""
    call = active.call()
    return 0 if call is None else (call.settings.seed + 7919 * call.launches) & 0x7FFFFFFF


def unpatch(call: CallRecord) -> None:
    """Put back what the call's hooks replaced on the interpreter."""
    for owner, name, original in reversed(call.restore):
        setattr(owner, name, original)
    call.restore = []


def on_import(module: ModuleType) -> None:
    """The interpreter module was just imported: fix its `and`/`or`, and patch it if a call is running."""
    boolops.install(module)
    if builder_hooks.boolop_note not in boolops.on_block_operands:
        boolops.on_block_operands.append(builder_hooks.boolop_note)
    call = active.call()
    if call is not None and not call.restore:
        _patch(call, module)


@contextmanager
def intercepted(settings: CallSettings) -> Iterator[CallRecord]:
    """The layer around one op call; the yielded record's `report()` says what it saw."""
    vectorise = PROCESS.vectorise if settings.vectorise is None else settings.vectorise
    if settings.shadow64 and settings.shadow_programs is None:
        vectorise = False  # the shadow follows every program, one at a time
    call = CallRecord(settings, PROCESS.kernels, vectorise)
    if settings.shadow64:
        call.shadow = ShadowRun(follows=settings.shadow_programs)
    if not settings.sanitize or active.call() is not None:
        yield call
        return
    active.RUNNING.call = call
    module = sys.modules.get(MODULE)
    if module is not None:
        on_import(module)
    try:
        yield call
    finally:
        tampered = _tampering(call)
        if tampered:
            call.findings.append((TAMPERED, tampered))
            guard.restore()
        active.RUNNING.call = None
        unpatch(call)


def _tampering(call: CallRecord) -> str:
    """Why the checks of this call may not all have run as the layer installed them ("" when they did): the op
    replaced the layer's record of the call, one of its hooks on the interpreter, or its code (guard.py)."""
    why = ""
    if active.call() is not call:
        why = "its record of the running call was replaced"
    elif call.patches > 1:
        why = "it was installed on the interpreter more than once during the call"
    else:
        last = {(id(o), n): (o, n, w) for o, n, w in call.installed}  # a shadow run wraps some hooks again
        moved = [
            f"{getattr(o, '__name__', o)}.{n}" for o, n, w in last.values() if o.__dict__.get(n) is not w
        ]
        changed = moved or guard.changed()
        if changed:
            why = f"{', '.join(changed[:5])} changed during the call"
    if not why:
        return ""
    return (
        f"the op changed gpuemu-ci's Triton layer while it ran ({why}): the bounds, race and masked-lane "
        "checks it was promised may not have run, so the case cannot pass"
    )
