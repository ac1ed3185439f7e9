"""The interpreter's builder methods that meet bfloat16 and fp8 values, replaced for an op call (layer.py), so
that those values are real numbers (lowp.py) from the load that reads their bits to the store that writes
them: the type table, casts and constants, fused multiply-adds, reductions, and the memory calls whose C++
side takes only NumPy's own types (given the bits). `tl.dot` is in layer.py (it also rounds fp32 to TF32).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from gpuemu_ci.triton_cpu import lowp
from gpuemu_ci.triton_cpu.boundary import Handle

MODULE = "triton.runtime.interpreter"
Wrap = Callable[[Any], Any]


def _name(tt_dtype: Any) -> str:
    """Triton's name of a value type's scalar ("bf16", "fp32"...; "" for pointers and anything else)."""
    import triton.language as tl

    scalar = tt_dtype.element_ty if isinstance(tt_dtype, tl.block_type) else tt_dtype
    if isinstance(scalar, tl.pointer_type):
        return ""
    return str(getattr(scalar, "name", ""))


def np_dtype(original: Any) -> Any:
    """The interpreter's `_get_np_dtype` with bf16 and fp8 as ml_dtypes' types, answered from a table of the
    types seen (the interpreter builds a table of every type at each call, a few per operation)."""
    seen: dict[Any, Any] = {}

    def np_dtype(tt_dtype: Any) -> Any:
        try:
            return seen[tt_dtype]
        except KeyError:
            found = seen[tt_dtype] = lowp.TYPES.get(_name(tt_dtype)) or original(tt_dtype)
            return found
        except TypeError:  # an unhashable type
            return lowp.TYPES.get(_name(tt_dtype)) or original(tt_dtype)

    return np_dtype


class Unmodelled(Exception):
    """A construct the layer does not compute as the GPU does (fp8e4b15): the case is not judged."""


def _handle(data: np.ndarray, tt_dtype: Any) -> Any:
    return sys.modules[MODULE].TensorHandle(data, tt_dtype)


def _refuse_unmodelled(*types: Any) -> None:
    for t in types:
        if _name(t) in lowp.UNMODELLED:
            raise Unmodelled(f"`{_name(t)}` values")


def cast_impl(original: Any) -> Any:
    """Casts from or to a low-precision type, rounded as the GPU rounds (fp32 -> bf16 to nearest even; the
    interpreter truncates); the others as the interpreter casts them."""

    def cast(self: Any, src: Handle, dst_type: Any) -> Any:
        module = sys.modules[MODULE]
        to = np.dtype(module._get_np_dtype(dst_type))
        if lowp.is_lowp(to) or lowp.is_lowp(src.data.dtype):
            return _handle(lowp.convert(src.data, to), dst_type.scalar)
        _refuse_unmodelled(src.dtype, dst_type)
        return original(self, src, dst_type)

    return cast


def fp_to_fp(original: Any) -> Any:
    """`create_fp_to_fp` (fp8 casts, bf16 <-> fp16, a downcast with `fp_downcast_rounding`): at the rounding
    mode asked for, fp8 saturating as `cvt.rn.satfinite` does."""

    def fp_to_fp(self: Any, src: Handle, dst_type: Any, rounding_mode: Any) -> Any:
        _refuse_unmodelled(src.dtype, dst_type)
        module = sys.modules[MODULE]
        to = np.dtype(module._get_np_dtype(dst_type))
        name = str(getattr(rounding_mode, "name", rounding_mode) or "rtne").lower()
        return _handle(lowp.convert(src.data, to, "rtz" if name == "rtz" else "rtne"), dst_type.scalar)

    return fp_to_fp


def get_bf16(original: Any) -> Any:
    """A bf16 constant rounded once from its Python value (the interpreter goes through fp32 and truncates)."""
    import triton.language as tl

    def get_bf16(self: Any, value: float) -> Any:
        return _handle(lowp.from_python(float(value), lowp.TYPES["bf16"]), tl.bfloat16)

    return get_bf16


def fma(original: Any) -> Any:
    """`create_fma` on low-precision values: x * y + z rounded once to their type, as the GPU's fma (lowp.fma)."""

    def fma(self: Any, x: Handle, y: Handle, z: Handle) -> Any:
        if not lowp.is_lowp(z.data.dtype):
            return original(self, x, y, z)
        xs, ys, zs = np.broadcast_arrays(x.data, y.data, z.data)
        data = lowp.fma(xs, ys, zs, z.data.dtype)
        return _handle(data, z.dtype.scalar)

    return fma


def reduce_sum(original: Any) -> Any:
    """`ReduceOps.sum` (a program's `tl.sum`) as lowp.block_sum, which the vectorised grid runs too."""

    def reduce_sum(self: Any, input: Any) -> Any:
        data = lowp.block_sum(input.handle.data, self.axis, self.keep_dims)
        return self.to_tensor(data, input.dtype)

    return reduce_sum


def reduce_min_max(original: Any) -> Any:
    """`ReduceOps.min_max` taking low-precision blocks (their exact fp32 values compared)."""

    def min_max(self: Any, input: Any, val_reduce_op: Any, idx_reduce_op: Any = None) -> Any:
        values = input[0] if isinstance(input, tuple) else input
        if not lowp.is_lowp(values.handle.data.dtype):
            return original(self, input, val_reduce_op, idx_reduce_op)
        wide = [None if op is None else lowp.widened(op) for op in (val_reduce_op, idx_reduce_op)]
        return original(self, input, *wide)

    return min_max


# ---- memory: the interpreter's C++ calls take NumPy's own types --------------------------------------------


def plain_load(ptrs: Handle, mask: Handle, other: Handle | None) -> Any:
    """A load of low-precision items through the interpreter's C++ load, as bits."""
    module = sys.modules[MODULE]
    element = ptrs.get_element_ty()
    dtype = np.dtype(module._get_np_dtype(element))
    bits = np.dtype(lowp.bits_of(np.zeros(0, dtype)).dtype)
    fill = np.zeros(np.shape(ptrs.data), dtype=bits) if other is None else lowp.bits_of(other.data)
    data = module._interpreter.load(ptrs.data, mask.data, fill, bits)
    return _handle(np.asarray(data).view(dtype), element)


def plain_store(ptrs: Handle, value: Handle, mask: Handle) -> Any:
    """A store of low-precision values as their bits (the interpreter's C++ store takes unsigned integers)."""
    module = sys.modules[MODULE]
    return module._interpreter.store(ptrs.data, lowp.bits_of(value.data), mask.data)


def atomic_rmw(op: Any, ptr: Handle, val: Handle, mask: Handle | None) -> Any:
    """An atomic on low-precision items (the interpreter has none): each active lane in turn, the old value
    read, combined in fp32 and rounded to the type (`atom.add.noftz.bf16`), written back; masked-off lanes
    return 0 (as NVIDIA's lowering gives them)."""
    module = sys.modules[MODULE]
    dtype = val.data.dtype
    name = str(getattr(op, "name", op)).upper()
    pointers = np.ravel(ptr.data)
    values = np.ravel(np.broadcast_to(val.data, np.shape(ptr.data)))
    active = (
        np.ones(pointers.shape, dtype=bool)
        if mask is None
        else np.ravel(np.broadcast_to(mask.data, np.shape(ptr.data)))
    )
    old = np.zeros(pointers.shape, dtype=dtype)
    bits = lowp.bits_of(np.zeros(0, dtype)).dtype
    one = np.ones(1, dtype=bool)
    for lane in np.flatnonzero(active):
        where = pointers[lane : lane + 1]
        before = np.asarray(module._interpreter.load(where, one, np.zeros(1, bits), bits)).view(dtype)
        if name == "FADD":
            after = (before.astype(np.float32) + values[lane : lane + 1].astype(np.float32)).astype(dtype)
        elif name == "XCHG":
            after = values[lane : lane + 1].astype(dtype)
        else:
            raise Unmodelled(f"`atomic_{name.lower()}` on `{_name(val.dtype)}`")
        module._interpreter.store(where, lowp.bits_of(np.ascontiguousarray(after)), one)
        old[lane] = before[0]
    return _handle(old.reshape(np.shape(ptr.data)), val.dtype.scalar)


def atomic_cas(builder: Any, ptr: Handle, cmp: Handle, val: Handle, sem: Any) -> Any:
    """A compare-and-swap on low-precision items: on their bits, as the GPU compares them."""
    module = sys.modules[MODULE]
    dtype = val.data.dtype
    old = module._interpreter.atomic_cas(
        ptr.data,
        np.ascontiguousarray(lowp.bits_of(cmp.data)),
        np.ascontiguousarray(lowp.bits_of(val.data)),
        builder.ir_sem_to_interpreter_sem[sem],
    )
    return _handle(np.asarray(old).view(dtype), cmp.dtype.scalar)


def replaced(module: ModuleType) -> list[tuple[Any, str, Wrap]]:
    """(owner, name, wrap) of the interpreter methods replaced for the low-precision types."""
    builder = module.InterpreterBuilder
    found: list[tuple[Any, str, Wrap]] = [
        (module, "_get_np_dtype", np_dtype),
        (builder, "cast_impl", cast_impl),
        (builder, "create_fp_to_fp", fp_to_fp),
        (builder, "get_bf16", get_bf16),
        (builder, "create_fma", fma),
    ]
    reduce_ops = getattr(module, "ReduceOps", None)
    if reduce_ops is not None and "sum" in reduce_ops.__dict__ and "min_max" in reduce_ops.__dict__:
        found += [(reduce_ops, "sum", reduce_sum), (reduce_ops, "min_max", reduce_min_max)]
    return [(owner, name, wrap) for owner, name, wrap in found if name in owner.__dict__]
