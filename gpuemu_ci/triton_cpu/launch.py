"""One launch of a kernel under the layer: the interpreter's grid executor, replaced (`run_grid`).

The programs run in a permutation drawn from the case seed (the determinism re-run draws another), so atomics
are applied in that order and a kernel that relies on program 0 running first is seen to. A launch runs every
program at once where it can (vectorised.py: replaying the tape of an earlier launch where one holds, else a
traced pass), else one program at a time, with the same outputs and findings. Which way a kernel went before is
remembered (`CallRecord.backoff` within a call, `KernelMemory` across calls) so that a kernel that cannot
vectorise pays little for trying.
"""

from __future__ import annotations

import functools
import inspect
import sys
import time
from collections.abc import Callable, Hashable
from types import ModuleType
from typing import Any

import numpy as np

from gpuemu_ci.triton_cpu import active, internal, language, sites, spent, tape, vectorised
from gpuemu_ci.triton_cpu.call import Backoff, CallRecord, KernelFault, Launch
from gpuemu_ci.triton_cpu.memory import Allocation, Memory
from gpuemu_ci.triton_cpu.provenance import BASE, is_pointer
from gpuemu_ci.triton_cpu.shadow import ShadowRun
from gpuemu_ci.triton_cpu.tracer import Tracer

MODULE = "triton.runtime.interpreter"
# Reasons a launch falls back whatever its data (atomics, a custom combine function, prints...): the kernel's
# later launches go straight to one program at a time (KernelMemory.per_program).
_STATIC_REASONS = ("`", "a reduction with a custom", "a scan with a custom", "tuple or descriptor")
# Within one op call, launches of a kernel that fell back for a reason of its data run per program directly
# after its first fallback (doubling after each further one, up to MAX_BACKOFF): the per-program run is the
# reference, so either way the outputs and findings are the same, and a kernel that keeps falling back pays a
# stopped pass on 1 launch in 5, then 9 ... 65.
FIRST_BACKOFF = 4
MAX_BACKOFF = 64
REMEMBERED = "an earlier launch of the kernel could not run vectorised"

# A kernel's signature, read once (inspect's readings are a noticeable part of a small vectorised launch).
_argspec = functools.lru_cache(maxsize=1024)(inspect.getfullargspec)
_signature = functools.lru_cache(maxsize=1024)(inspect.signature)


def _fault_in(exc: BaseException) -> KernelFault | None:
    found = vectorised.find_cause(exc, KernelFault)
    return found if isinstance(found, KernelFault) else None


def _allocations(call_args: dict[str, Any], constexprs: list[str]) -> list[Allocation]:
    """The memory the kernel's tensor arguments live in (inside tuples, descriptors and wrappers too)."""
    found: list[Allocation] = []

    def visit(name: str, value: Any) -> None:
        if isinstance(value, tuple):
            for i, item in enumerate(value):
                visit(f"{name}[{i}]", item)
            return
        base = getattr(value, "base", None)
        if type(value).__name__ == "TensorDescriptor" and base is not None:
            value = base
        if type(value).__name__ == "TensorWrapper":
            value = value.base
        if hasattr(value, "data_ptr") and hasattr(value, "untyped_storage"):
            found.append(Allocation.of(name, value))

    for name, value in call_args.items():
        if name not in constexprs:
            visit(name, value)
    return found


def run_grid(original: Callable[..., Any]) -> Callable[..., Any]:
    """`GridExecutor.__call__` under the layer: the launch watched, in the call's program order."""

    def run(self: Any, *args_dev: Any, **kwargs: Any) -> Any:
        call = active.call()
        if call is None:
            return original(self, *args_dev, **kwargs)
        module = sys.modules[MODULE]
        import triton

        argspec = _argspec(self.fn)
        kwargs = {k: v for k, v in kwargs.items() if k in argspec.args or k in argspec.kwonlyargs}
        args_hst, kwargs_hst = self._init_args_hst(args_dev, kwargs)
        for hook in self.pre_run_hooks:
            hook(*args_hst, **kwargs_hst)
        patch_lang = module.__dict__["_patch_lang"]
        setattr(module, "_patch_lang", language.patched_once(patch_lang))  # noqa: B010  # the interpreter's global
        patch_scope = language.LazyPatch(
            module, self.fn
        )  # a replayed launch runs no kernel Python: no patching
        try:
            bound = _signature(self.fn).bind(*args_hst, **kwargs_hst)
            bound.apply_defaults()
            call_args = dict(bound.arguments)
            memory = Memory(_allocations(call_args, self.constexprs))
            args = {
                name: arg if name in self.constexprs else module._implicit_cvt(arg)
                for name, arg in call_args.items()
            }
            for name, value in args.items():
                handle = getattr(value, "handle", None)
                if handle is not None and is_pointer(handle):
                    handle.attr[BASE] = name
            given = self.grid(args) if callable(self.grid) else self.grid
            assert len(given) <= 3, "grid must have at most 3 dimensions"
            dims = tuple(int(g) for g in given) + (1,) * (3 - len(given))
            module.interpreter_builder.set_grid_dim(*dims)
            launch = Launch(getattr(self.fn, "__name__", "kernel"), dims, memory)  # type: ignore[arg-type]
            rng = np.random.default_rng([call.settings.seed & (2**64 - 1), call.settings.call, call.launches])
            call.launches += 1
            call.launch = launch
            order = rng.permutation(dims[0] * dims[1] * dims[2])
            if not call.settings.seeded_order:
                order = np.arange(order.size)
            try:
                shadow = call.shadow
                if shadow is not None:  # the programs it follows first, alone; the others as in any call
                    order = _shadowed_first(shadow, self.fn, module, args, launch, order, patch_scope.apply)
                if call.vectorise and order.size > 1:  # a shadow of every program turned it off (layer.py)
                    why = _vectorised(self, module, args, call, call_args, launch, order, patch_scope.apply)
                    if why is None:
                        order = order[:0]
                    else:
                        call.per_program[why] = call.per_program.get(why, 0) + 1
                if order.size:
                    patch_scope.apply()
                _one_at_a_time(self.fn, module, args, launch, order)
            except Exception as exc:
                fault = _fault_in(exc)
                if fault is not None:
                    raise KernelFault(str(fault)) from None
                internal.raise_if_internal(call, self.fn, exc)
                if triton.knobs.compilation.front_end_debugging:
                    raise
                raise module.InterpreterError(repr(exc)) from exc
            finally:
                call.launch = None
        except (KernelFault, internal.LayerError, module.InterpreterError):
            raise
        except Exception as exc:  # before any program ran: the arguments, the grid
            internal.raise_if_internal(call, self.fn, exc)
            raise
        finally:
            patch_scope.restore()
            setattr(module, "_patch_lang", patch_lang)  # noqa: B010
        self._restore_args_dev(args_dev, args_hst, kwargs, kwargs_hst)

    return run


def _shadowed_first(
    shadow: ShadowRun,
    fn: Callable[..., Any],
    module: ModuleType,
    args: dict[str, Any],
    launch: Launch,
    order: np.ndarray,
    patch_language: Callable[[], None],
) -> np.ndarray:
    """Runs the programs the shadow names, alone and in its order, until one has a finding (shadow.py); returns
    the launch's order without those that ran."""
    ran: list[int] = []
    named = shadow.alone(launch, order.size)
    if named:
        patch_language()
    for pid in named:
        if shadow.settled:
            break
        shadow.alone_now = True
        try:
            _one_at_a_time(fn, module, args, launch, np.array([pid]))
        finally:
            shadow.alone_now = False
        shadow.ran_alone()
        ran.append(pid)
    return order[~np.isin(order, ran)] if ran else order


def _one_at_a_time(
    fn: Callable[..., Any], module: ModuleType, args: dict[str, Any], launch: Launch, pids: np.ndarray
) -> None:
    gy, gz = launch.grid[1], launch.grid[2]
    for pid in pids.tolist():
        program = (pid // (gy * gz), (pid // gz) % gy, pid % gz)
        module.interpreter_builder.set_grid_idx(*program)
        launch.program, launch.pid, launch.synchronised = program, pid, False
        fn(**args)


def _vectorised(
    executor: Any,
    module: ModuleType,
    args: dict[str, Any],
    call: CallRecord,
    call_args: dict[str, Any],
    launch: Launch,
    order: np.ndarray,
    patch_language: Callable[[], None],
) -> str | None:
    """Run the launch with every program at once where it can (None), else say why it must run one program
    at a time. A launch of a kernel with a tape replays it (replay.py); else the pass runs the kernel's
    Python (`patch_language()` first) and is traced. A kernel that fell back for a reason of its code is not
    tried again; one that fell back for a reason of its data (an access out of bounds, programs touching each
    other's data, branches in too many groups) is tried again only after 4 launches, a number that doubles
    each time it falls back again, so that the stopped passes cost little next to the launches run per
    program directly."""
    kernels = call.kernels
    kernel = (executor.fn, tuple(repr(call_args.get(n)) for n in executor.constexprs))
    static = kernels.per_program.get(kernel)
    if static is not None:
        return static
    signature = (kernel, tuple(str(getattr(v, "type", "")) for v in args.values()))
    backoff = call.backoff.get(signature)
    if backoff is not None and backoff.skip > 0:
        backoff.skip -= 1
        return f"{REMEMBERED} ({backoff.why})"
    tracer = None
    key = tape.tape_key(signature, args)
    if call.settings.replay:
        tried = time.perf_counter()
        groups = _replayed(module, args, call, launch, order, key)
        if groups is None:
            spent.add(time.perf_counter() - tried)  # a replay abandoned (or no tape): paid for nothing
        if groups is not None:
            call.backoff.pop(signature, None)
            call.vectorised += 1
            call.replayed += 1
            if groups > 1:
                call.grouped[groups] = call.grouped.get(groups, 0) + 1
            return None
        # A kernel whose traced pass fell back runs its next pass untraced (a fallback pays no tracing), and
        # is traced again after a pass that did not fall back.
        if key not in kernels.untraceable and key not in kernels.traced_fell_back:
            tracer = Tracer(lambda: sites.site(launch))
    patch_language()
    launch.tracer = tracer
    passed = time.perf_counter()
    try:
        outcome = vectorised.run(executor, module, args, launch, order, tracer)
    finally:
        launch.tracer = None
    if tracer is not None or outcome.why is not None:  # making a tape, or a pass abandoned for per program
        spent.add(time.perf_counter() - passed)
    if call.settings.replay:
        if tracer is not None:
            _keep_tape(call, key, tracer, outcome.why is None)
        if outcome.why is None:
            kernels.traced_fell_back.discard(key)
        elif tracer is not None:
            kernels.traced_fell_back.add(key)
    if outcome.why is None:
        call.backoff.pop(signature, None)
        call.vectorised += 1
        if outcome.groups > 1:
            call.grouped[outcome.groups] = call.grouped.get(outcome.groups, 0) + 1
    elif outcome.why.startswith(_STATIC_REASONS):
        kernels.per_program[kernel] = outcome.why
    else:
        wait = FIRST_BACKOFF if backoff is None else min(2 * backoff.wait, MAX_BACKOFF)
        call.backoff[signature] = Backoff(outcome.why, wait, wait)
    return outcome.why


def _replayed(
    module: ModuleType,
    args: dict[str, Any],
    call: CallRecord,
    launch: Launch,
    order: np.ndarray,
    key: Hashable,
) -> int | None:
    """The number of groups the launch ran in by replaying tapes of the kernel, or None when it did not (then
    memory and what the call has noted are as before it)."""
    kept = call.kernels.tapes.get(key)
    if not kept:
        return None

    def noted() -> Callable[[], None]:
        then = (
            call.site_lookups, dict(call.undefined), set(call.dot_precisions), dict(call.notes),
            dict(call.dot_sites), dict(call.dot_defaulted), call.atomics, set(call.gaps),
        )  # fmt: skip

        def put_back() -> None:
            (
                call.site_lookups, call.undefined, call.dot_precisions, call.notes, call.dot_sites,
                call.dot_defaulted, call.atomics, call.gaps,
            ) = then  # fmt: skip

        return put_back

    put_back = noted()
    why, groups = vectorised.replayed(kept, module, args, launch, order, noted)
    if why is None:
        call.kernels.counts["replayed"] += 1
        return groups
    call.kernels.counts["abandoned"] += 1
    put_back()
    return None


def _keep_tape(call: CallRecord, key: Hashable, tracer: Tracer, vectorised_ok: bool) -> None:
    """The traced pass's tape, kept for later launches (up to `tape.TAPES_PER_KEY` per key, for the loops'
    trip counts and branches seen); or why the kernel cannot be traced."""
    if not vectorised_ok:
        return  # the launch fell back (the pass stopped): nothing to learn about the kernel's code
    tapes = call.kernels.tapes
    if tracer.broken:
        call.kernels.untraceable[key] = tracer.broken
        tapes.pop(key, None)
        return
    call.kernels.counts["traced"] += 1
    if len(tapes) >= tape.MAX_TAPES and key not in tapes:
        tapes.pop(next(iter(tapes)))
    kept = tapes.setdefault(key, [])
    for made in tracer.harvested:
        kept.insert(0, made)
    del kept[tape.TAPES_PER_KEY :]
