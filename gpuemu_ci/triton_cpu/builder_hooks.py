"""The interpreter's builder operations that the layer intercepts, one wrapper each (`wrap(original) -> method`).

Loads, stores and atomics are checked before they happen (accesses.py); masked-off lanes of a load without
`other` (and of an atomic's result) read 0, as NVIDIA's and AMD's lowering gives them, or poison where the call
asks for it (numerics.py); bfloat16 and fp8 go through lowp_builder.py; fp32 `tl.dot` runs at its
`input_precision` (TF32 by default, as on the GPU) and the precisions used are noted; inline assembly, extern
calls and scaled dots are noted as the interpreter's gaps. Each wrapper finds the running call through
active.py: Triton calls it with its own arguments only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from gpuemu_ci.triton_cpu import accesses, active, grid, lowp, lowp_builder, numerics, sites, where
from gpuemu_ci.triton_cpu.boundary import Handle
from gpuemu_ci.triton_cpu.call import MAX_POISON_SITES, CallRecord
from gpuemu_ci.triton_cpu.provenance import base_of

MODULE = "triton.runtime.interpreter"
Method = Callable[..., Any]


def _batched_load_operands(ptrs: Handle, mask: Handle, other: Handle | None) -> tuple[Any, Any, Any]:
    """A vectorised load's pointers, mask and `other` at one (programs, *block) shape."""
    module = sys.modules[MODULE]
    arrays = [ptrs.data, mask.data] + ([] if other is None else [other.data])
    shaped = grid.broadcast(*arrays)
    ptrs = module.TensorHandle(shaped[0], ptrs.dtype, dict(ptrs.attr))
    mask = module.TensorHandle(shaped[1], mask.dtype)
    if other is not None:
        other = module.TensorHandle(shaped[2], other.dtype)
    return ptrs, mask, other


def masked_load(original: Method) -> Method:
    """`create_masked_load`, checked, with masked-off lanes read as the GPU reads them."""

    # The hints after `other` (Triton 3.6: cache_modifier, eviction_policy, is_volatile; later: cache_policy,
    # is_volatile) pass through untouched, whatever this Triton's interpreter names them.
    def load(self: Any, ptrs: Handle, mask: Handle, other: Handle | None, *hints: Any, **named: Any) -> Any:
        call = active.call()
        launch = None if call is None else call.launch
        batched = launch is not None and launch.batch is not None
        if batched:
            ptrs, mask, other = _batched_load_operands(ptrs, mask, other)
        if call is not None and launch is not None:
            addresses, flat_mask = accesses.checked(call, launch, "load", ptrs.data, mask.data, base_of(ptrs))
            located = None
            if batched:
                located = accesses.watch_batched(launch, ptrs.data, flat_mask, addresses, write=False)
            else:
                accesses.watch_read(call, launch, addresses.addresses)
            if other is None and flat_mask is not None:  # some lane masked off (`active_lanes`)
                other = _masked_fill(call, ptrs, batched)
            if located is not None and np.ndim(ptrs.data) > 0:
                found = accesses.gathered(launch.memory, located, addresses, ptrs, flat_mask, other)
                if found is not None:
                    return found
        if lowp.is_lowp(np.dtype(sys.modules[MODULE]._get_np_dtype(ptrs.get_element_ty()))):
            return lowp_builder.plain_load(ptrs, mask, other)
        return original(self, ptrs, mask, other, *hints, **named)

    return load


def _masked_fill(call: CallRecord, ptrs: Handle, batched: bool) -> Any:
    """What the masked-off lanes of a load without `other` read: 0, as NVIDIA's and AMD's lowering gives them
    (a register zeroed before the predicated load), or the poison block where the call asks for it."""
    module = sys.modules[MODULE]
    element = ptrs.get_element_ty()
    dtype = np.dtype(module._get_np_dtype(element))
    shape = np.shape(ptrs.data)
    site = call.note_undefined("")
    if not call.poisons(site or ""):
        return module.TensorHandle(np.zeros(shape, dtype=dtype), element)
    block = numerics.poison_block(
        getattr(element, "name", ""), dtype, shape[1:] if batched else shape, call.settings.seed
    )
    if batched:  # each program's lanes poisoned as the program alone would be
        block = np.ascontiguousarray(np.broadcast_to(block, shape))
    return module.TensorHandle(block, element)


def masked_store(original: Method) -> Method:
    """`create_masked_store`, checked (bounds, races) before it writes."""

    def store(self: Any, ptrs: Handle, value: Handle, mask: Handle, *hints: Any, **named: Any) -> Any:
        call = active.call()
        launch = None if call is None else call.launch
        batched = launch is not None and launch.batch is not None
        base = base_of(ptrs)
        if batched:
            module = sys.modules[MODULE]
            p, v, m = grid.broadcast(ptrs.data, value.data, mask.data)
            ptrs, value = module.TensorHandle(p, ptrs.dtype), module.TensorHandle(v, value.dtype)
            mask = module.TensorHandle(m, mask.dtype)
        if call is not None and launch is not None:
            addresses, flat_mask = accesses.checked(call, launch, "store", ptrs.data, mask.data, base)
            if call.settings.log_stores:
                where.note_store(call.stores, launch, addresses.addresses, flat_mask, np.shape(ptrs.data))
            if batched:
                located = accesses.watch_batched(launch, ptrs.data, flat_mask, addresses, write=True)
                if located is not None and accesses.scattered(
                    launch.memory, located, addresses, value.data, flat_mask
                ):
                    return None
            else:
                accesses.watch_write(call, launch, addresses.addresses, ptrs.data, value.data, flat_mask)
        if lowp.is_lowp(value.data.dtype):
            return lowp_builder.plain_store(ptrs, value, mask)
        return original(self, ptrs, value, mask, *hints, **named)

    return store


def _synchronised(call: CallRecord | None, ptr: Handle, mask: np.ndarray | None) -> None:
    """An atomic, checked: the program's later reads may see other programs' writes."""
    launch = None if call is None else call.launch
    if call is None or launch is None:
        return
    addresses, flat_mask = accesses.checked(call, launch, "atomic", ptr.data, mask, base_of(ptr))
    if call.settings.log_stores:  # it writes too
        where.note_store(call.stores, launch, addresses.addresses, flat_mask, np.shape(ptr.data))
    launch.synchronised = True
    call.atomics = call.atomics or int(np.prod(launch.grid)) > 1


def atomic_rmw(original: Method) -> Method:
    """`create_atomic_rmw`, checked, with masked-off lanes of its result as the GPU gives them."""

    def rmw(self: Any, op: Any, ptr: Handle, val: Handle, mask: Handle | None, sem: Any, scope: Any) -> Any:
        call = active.call()
        flat_mask = None if mask is None else mask.data
        _synchronised(call, ptr, flat_mask)
        if lowp.is_lowp(val.data.dtype):
            made = lowp_builder.atomic_rmw(op, ptr, val, mask)
        else:
            made = original(self, op, ptr, val, mask, sem, scope)
        if call is not None and call.launch is not None and flat_mask is not None:
            made = _masked_atomic_lanes(call, made, flat_mask)
        return made

    return rmw


def _masked_atomic_lanes(call: CallRecord, made: Handle, mask: np.ndarray) -> Any:
    """An atomic's result at its masked-off lanes: 0 (NVIDIA zeroes the register; AMD leaves it undefined), or
    poison where the call asks for it. Noted as a site like a load without `other`."""
    masked = ~np.broadcast_to(mask, np.shape(made.data))
    if not masked.any():
        return made
    site = call.note_undefined(" (an atomic's result)")
    if not call.poisons(site or ""):
        return made
    dtype = made.data.dtype
    poison = numerics.poison_block(
        getattr(made.dtype, "name", ""), dtype, np.shape(made.data), call.settings.seed
    )
    data = np.where(masked, poison, made.data).astype(dtype, copy=False)
    return sys.modules[MODULE].TensorHandle(data, made.dtype)


def atomic_cas(original: Method) -> Method:
    """`create_atomic_cas`, checked."""

    def cas(self: Any, ptr: Handle, cmp: Handle, val: Handle, sem: Any, scope: Any) -> Any:
        _synchronised(active.call(), ptr, None)
        if lowp.is_lowp(val.data.dtype):
            return lowp_builder.atomic_cas(self, ptr, cmp, val, sem)
        return original(self, ptr, cmp, val, sem, scope)

    return cas


def dot(original: Method) -> Method:
    """`create_dot` at the GPU's precision: fp32 inputs at their `input_precision` (TF32 unless asked
    otherwise), bfloat16 and fp8 products exact, accumulated in fp32; the precisions used are noted."""

    def create_dot(
        self: Any, a: Handle, b: Handle, d: Handle, input_precision: Any, max_num_imprecise_acc: Any
    ) -> Any:
        call = active.call()
        module = sys.modules[MODULE]
        if call is None:
            return original(self, a, b, d, input_precision, max_num_imprecise_acc)
        if lowp.is_lowp(a.data.dtype) or lowp.is_lowp(b.data.dtype):
            # bf16 and fp8 products are exact in fp32; the GPU accumulates them in fp32 (`d`'s type).
            result = numerics.dot_fp32(a.data.astype(np.float32), b.data.astype(np.float32), d.data, "ieee")
            return module.TensorHandle(result, d.dtype.scalar)
        if a.data.dtype != np.float32 or b.data.dtype != np.float32:
            return original(self, a, b, d, input_precision, max_num_imprecise_acc)
        name = getattr(input_precision, "name", str(input_precision)).lower()
        precision = name if name in ("tf32", "tf32x3") else "ieee"
        if call.settings.ieee_dots:
            precision = "ieee"
        call.dot_precisions.add(precision)
        if precision != "ieee" or call.dot_defaulted_now:
            _note_dot(call, precision)
        result = numerics.dot_fp32(a.data, b.data, d.data, precision)
        return module.TensorHandle(result, d.dtype.scalar)

    return create_dot


def _note_dot(call: CallRecord, precision: str) -> None:
    if len(call.dot_sites) >= MAX_POISON_SITES or not call.looked_up():
        return
    site = f"`{call.launch.kernel if call.launch else 'kernel'}` at {sites.site(call.launch)}"
    if precision != "ieee":
        call.dot_sites.setdefault(site, precision)
    # Lines whose fp32 `tl.dot` left `input_precision` at its default, as the traced pass saw them (a replay
    # runs no Python to tell): the note is made again when the tape replays the dot at that line.
    if call.dot_defaulted_now:
        call.kernels.defaulted_dots.add(site)
    if site in call.kernels.defaulted_dots:
        call.dot_defaulted.setdefault(site)


def _note_gap(what: str) -> None:
    call = active.call()
    if call is not None:
        call.note_gap(what)


def _gap(name: str, original: Method) -> Method:
    """The interpreter raises NotImplementedError for inline assembly and extern calls: recorded with the kernel
    and line, so that the case is reported as not judged (the interpreter's gap), not as the kernel raising."""

    def unsupported(self: Any, *args: Any, **kwargs: Any) -> Any:
        _note_gap(f"`{name}`")
        return original(self, *args, **kwargs)

    return unsupported


def inline_asm_gap(original: Method) -> Method:
    """`create_inline_asm`, noted as the interpreter's gap (it runs only on a GPU)."""
    return _gap("inline_asm_elementwise", original)


def extern_gap(original: Method) -> Method:
    """`create_extern_elementwise`, noted as the interpreter's gap."""
    return _gap("extern_elementwise", original)


def dot_scaled_gap(original: Method) -> Method:
    """Scaled dots (microscaling formats) compute in bf16 bit patterns in the interpreter: not judged."""

    def dot_scaled(self: Any, *args: Any, **kwargs: Any) -> Any:
        _note_gap("`dot_scaled`")
        raise NotImplementedError("dot_scaled is not computed as the GPU computes it here")

    return dot_scaled


def modelled(wrap: Callable[[Method], Method]) -> Callable[[Method], Method]:
    """A lowp_builder replacement whose `Unmodelled` (fp8e4b15) is recorded as a gap, with the kernel and line."""

    def wrapped(original: Method) -> Method:
        inner = wrap(original)

        def method(*args: Any, **kwargs: Any) -> Any:
            try:
                return inner(*args, **kwargs)
            except lowp_builder.Unmodelled as exc:
                _note_gap(str(exc))
                raise NotImplementedError(f"{exc} are not computed as the GPU computes them here") from None

        return method

    return wrapped


def boolop_note() -> None:
    """Python `and`/`or` on a block (boolops.py): noted once per site; a traced pass stops (a replay does not
    run the kernel's Python that makes the note)."""
    tracer = active.tracer()
    if tracer is not None:
        tracer.stop("Python `and`/`or` on a block")
    call = active.call()
    if call is not None and len(call.notes) < MAX_POISON_SITES and call.looked_up():
        call.notes.setdefault(
            f"Python `and`/`or` on tensors at {sites.site(call.launch)}: evaluated elementwise as the GPU "
            "compiler does (the interpreter would keep one operand); Triton deprecates it, use `&` / `|`"
        )
