"""The interpreter's operations with their float64 shadow (shadow.py), installed for a call that asks for it
(`CallSettings.shadow64`): one wrapper per builder method, and one around the interpreter's reductions and scans.

Each wrapper runs the kernel's operation as it is, then, where it made a float value, the same operation on the
operands' float64 twins (the interpreter's own method, handed float64 values), and has the run measure the two
(`ShadowRun.follow`). What is not computed twice: constants (their twin is the Python value the kernel wrote),
casts between floats (the twin passes through: rounding to the narrower type is the kernel's, not the shadow's),
integer-to-float casts (exact), loads and atomics (their values are their own twins), stores (compared, not
written). Integer and boolean values (indices, masks, comparisons) have no twin: the shadow follows the kernel's
own control flow. A reduction with a custom combine function gives a value without a twin (the next operation
starts the twin again from the kernel's value), counted in `ShadowRun.unshadowed`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from gpuemu_ci.triton_cpu import active, lowp
from gpuemu_ci.triton_cpu.boundary import Method
from gpuemu_ci.triton_cpu.report import DOT_INPUT_ROUNDOFF
from gpuemu_ci.triton_cpu.shadow import ShadowRun, twin, unit_roundoff

MODULE = "triton.runtime.interpreter"
Wrap = Callable[[Any], Any]

CONSTANTS = frozenset({"get_fp16", "get_fp32", "get_fp64", "get_bf16"})
CASTS = frozenset({"cast_impl", "create_fp_to_fp", "create_fp_ext", "create_fp_trunc", "create_si_to_fp",
                   "create_ui_to_fp", "create_int_cast"})  # fmt: skip
STORES = frozenset({"create_masked_store", "create_store", "create_descriptor_store"})
# Operations whose result is read from memory or has effects: its data is its own twin (nothing run twice).
_OWN_TWIN = (
    "load",
    "atomic",
    "descriptor",
    "print",
    "assert",
    "histogram",
    "inline_asm",
    "extern",
    "dot_scaled",
)
# Library functions that NumPy computes within a few units of rounding (not one, as arithmetic).
_FUNCTIONS = frozenset({"create_exp", "create_exp2", "create_log", "create_log2", "create_sin", "create_cos",
                        "create_sqrt", "create_precise_sqrt", "create_rsqrt", "create_erf"})  # fmt: skip


def _run() -> ShadowRun | None:
    """The call's shadow run, where it follows the program running now."""
    call = active.call()
    if call is None or call.shadow is None:
        return None
    return call.shadow if call.shadow.watching(call.launch) else None


def _is_float(handle: Any) -> bool:
    data = getattr(handle, "data", None)
    return isinstance(data, np.ndarray) and lowp.is_float(data.dtype)


def _results(made: Any) -> list[Any]:
    items = made if isinstance(made, tuple) else (made,)
    return [m for m in items if _is_float(m)]


def _lifted(args: tuple[Any, ...]) -> tuple[list[Any], float, list[Any]]:
    """The arguments with each float value replaced by its twin (as a float64 value), the largest divergence
    they carry, and the float operands."""
    module = sys.modules[MODULE]
    import triton.language as tl

    lifted: list[Any] = []
    operands: list[Any] = []
    carried = 0.0
    for arg in args:
        if _is_float(arg):
            values, parted = twin(arg)
            carried = max(carried, parted)
            operands.append(arg)
            lifted.append(module.TensorHandle(values, tl.float64))
        else:
            lifted.append(arg)
    return lifted, carried, operands


def _terms(name: str, args: tuple[Any, ...], made: Any) -> float:
    """How many units of rounding of its result an operation may add by itself."""
    if name == "create_dot":
        a = args[0]
        terms = float(np.shape(a.data)[-1]) if np.ndim(a.data) else 1.0
        if np.asarray(a.data).dtype == np.float32:
            call = active.call()
            precision = getattr(args[3], "name", str(args[3])).lower() if len(args) > 3 else "ieee"
            if call is not None and call.settings.ieee_dots:
                precision = "ieee"
            unit = unit_roundoff(np.dtype(np.asarray(made.data).dtype))
            terms += 2 * DOT_INPUT_ROUNDOFF.get(precision, 0.0) / unit  # inputs rounded to TF32
        return terms
    return 4.0 if name in _FUNCTIONS else 1.0


def _follow(run: ShadowRun, name: str, original: Method, builder: Any, args: tuple[Any, ...],
            kwargs: dict[str, Any], made: Any) -> None:  # fmt: skip
    """The shadow of one builder operation the kernel just ran (`made` is its result)."""
    if name in STORES:
        value = args[1]
        mask = args[2] if name == "create_masked_store" else None
        run.stored(value, mask)
        return
    if any(word in name for word in _OWN_TWIN):
        if "load" in name:
            for result in _results(made):
                run.loaded(result)
        return
    results = _results(made)
    if not results:
        return
    if name in CONSTANTS:
        run.follow(results[0], np.array([float(args[0])], dtype=np.float64), 0.0, 1.0, [])
        return
    run.made(name, results, [a for a in args if _is_float(a)])  # before the twin, which may not be computable
    if name in CASTS:
        source = args[0]
        values, parted = (
            twin(source) if _is_float(source) else (np.asarray(source.data).astype(np.float64), 0.0)
        )
        run.follow(results[0], values, parted, 1.0, [source])
        return
    lifted, carried, operands = _lifted(args)
    if not operands:
        return  # made from no float value (a zero, a splat of an integer): its data is its own twin
    shadow = original(builder, *lifted, **kwargs)
    twins = shadow if isinstance(shadow, tuple) else (shadow,)
    made_all = made if isinstance(made, tuple) else (made,)
    terms = _terms(name, args, results[0])
    for kernel_value, shadow_value in zip(made_all, twins, strict=True):
        if _is_float(kernel_value):
            run.follow(
                kernel_value, np.asarray(shadow_value.data, dtype=np.float64), carried, terms, operands
            )


def _shadowed(name: str) -> Wrap:
    def wrap(original: Method) -> Method:
        def method(builder: Any, *args: Any, **kwargs: Any) -> Any:
            run = _run()
            if run is None or run.depth:
                return original(builder, *args, **kwargs)
            run.depth += 1
            try:
                made = original(builder, *args, **kwargs)
                try:
                    _follow(run, name, original, builder, args, kwargs, made)
                except Exception:  # a twin not computed never stops the kernel's own run
                    run.skipped(name)  # the next operation starts its twin afresh
            finally:
                run.depth -= 1
            return made

        return method

    return wrap


# ---- reductions and scans (the interpreter runs them on its language's tensors, not through the builder) ----


def _reduced(combine_fn: Any) -> Callable[..., np.ndarray] | None:
    """The float64 reduction of a combine function the interpreter knows (None for a custom one)."""
    import triton.language as tl

    std = tl.standard
    if combine_fn is std._sum_combine:
        return np.sum
    if combine_fn in (
        std._elementwise_max,
        std._argmax_combine_tie_break_left,
        std._argmax_combine_tie_break_fast,
    ):
        return np.nanmax
    if combine_fn in (
        std._elementwise_min,
        std._argmin_combine_tie_break_left,
        std._argmin_combine_tie_break_fast,
    ):
        return np.nanmin
    return None


def _first_float(made: Any) -> Any:
    items = made if isinstance(made, (tuple, list)) else (made,)
    handle = getattr(items[0], "handle", None) if items else None
    return handle if _is_float(handle) else None


def _follow_reduction(run: ShadowRun, ops: Any, inputs: tuple[Any, ...], made: Any, scan: bool) -> None:
    result = _first_float(made)
    source = inputs[0].handle if inputs else None
    if result is None or not _is_float(source):
        return
    import triton.language as tl

    values, carried = twin(source)
    axis = ops.axis
    terms = float(values.size if axis is None else values.shape[axis])
    if scan:
        if ops.combine_fn not in (tl.standard._sum_combine, tl.standard._prod_combine) or len(inputs) != 1:
            run.skipped("a scan with a custom combine function")
            return
        step = np.cumsum if ops.combine_fn is tl.standard._sum_combine else np.cumprod
        ordered = np.flip(values, axis=axis) if ops.reverse else values
        shadow = step(ordered, axis=axis)
        shadow = np.flip(shadow, axis=axis) if ops.reverse else shadow
    else:
        reduce = _reduced(ops.combine_fn)
        if reduce is None:
            run.skipped("a reduction with a custom combine function")
            return
        terms = terms if reduce is np.sum else 1.0
        shadow = np.asarray(reduce(values, axis=axis, keepdims=ops.keep_dims))
    run.follow(result, np.ascontiguousarray(shadow, dtype=np.float64), carried, terms, [source])


def _reduction(scan: bool) -> Wrap:
    def wrap(original: Method) -> Method:
        def apply_impl(ops: Any, inputs: Any) -> Any:
            run = _run()
            if run is None or run.depth:
                return original(ops, inputs)
            run.depth += 1  # a custom combine function runs the builder per element: not shadowed
            try:
                made = original(ops, inputs)
                try:
                    _follow_reduction(run, ops, tuple(inputs), made, scan)
                except Exception:  # as above
                    run.skipped("a reduction")
            finally:
                run.depth -= 1
            return made

        return apply_impl

    return wrap


def replaced(module: ModuleType) -> list[tuple[Any, str, Wrap]]:
    """(owner, name, wrap) of what a shadow run wraps on this interpreter: every builder method that makes or
    stores a value, and the reductions' and scans' `apply_impl`."""
    builder = module.InterpreterBuilder
    found: list[tuple[Any, str, Wrap]] = [
        (builder, name, _shadowed(name))
        for name in sorted(builder.__dict__)
        if (name.startswith("create_") or name in CONSTANTS or name == "cast_impl")
        and callable(builder.__dict__[name])
    ]
    for owner_name, scan in (("ReduceOps", False), ("ScanOps", True)):
        owner = getattr(module, owner_name, None)
        if owner is not None and "apply_impl" in owner.__dict__:
            found.append((owner, "apply_impl", _reduction(scan)))
    return found
