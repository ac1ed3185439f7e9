"""A KernelBench-style oracle, for comparison with gpuemu-ci.

KernelBench checks a kernel at one fixed benchmark shape: `num_correct_trials = 5` trials with fresh random
inputs, the reference run first and the kernel second on the same tensors, and
`torch.allclose(out, ref, atol=tol, rtol=tol)` with tol = 1e-4 for fp32 and 1e-2 for fp16/bf16, the reference
in the kernel's own dtype. This module does the same without torch:

- the shape: every dim at its largest power-of-two typical size (what benchmark problems use);
- the values: standard normal (near 1 for norm weights, [-1, 1] for rotary tables, uniform ids for indices);
- kwargs: the first value the config lists (a benchmark problem fixes its constructor arguments), and those
  bound to dims;
- the reference: the op's fp64 reference on the same rounded inputs, its output cast to the kernel's dtype
  (a same-dtype reference that adds no error of its own, which can only spare the baseline false alarms);
- the verdict: `np.allclose(out, ref, atol=tol, rtol=tol)` (NaN is unequal to NaN, as in torch.allclose); an
  exception or a wrong shape fails the trial.

Entries with `backward = true` get the gradient check the field's kernel tests use at one shape
(oneshape_gradcheck.py): torch.autograd.gradcheck's comparison of the analytical gradients with the reference's,
at the same shape and tolerances.

It has no notion of input mutation, determinism, `out=` buffers or rounding bias, exactly like its model.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.config.dimgraph import schema_of
from gpuemu_ci.config.expressions import evaluate_int
from gpuemu_ci.config.model import Family, InputSpec, OpSpec, ValueKind
from gpuemu_ci.fuzz.shapes import resolve

TRIALS = 5
TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2}


@dataclass(frozen=True)
class BaselineVerdict:
    """The outcome of one entry under the one-shape oracle, for one master seed."""

    caught: bool
    detail: str  # the first failing trial, or the shape that passed


def benchmark_dims(op: OpSpec) -> dict[str, int]:
    """Each drawn dim at its largest power-of-two typical size (the largest typical size when none is one);
    derived dims follow (a benchmark problem's shapes are consistent)."""
    schema = schema_of(op.name, op.shapes, op.line)
    values: dict[str, object] = {name: candidates[0] for name, candidates in op.shapes.kwargs}
    for name in schema.free_dims:
        sizes = schema.typical(name, values)
        powers = [t for t in sizes if t > 0 and t & (t - 1) == 0]
        values[name] = max(powers or sizes)
    dims, _, _ = resolve(op, {n: int(v) for n, v in values.items() if n in schema.free_dims}, values)  # type: ignore[call-overload]
    return dims


def benchmark_kwargs(op: OpSpec, dims: Mapping[str, int]) -> dict[str, Any]:
    """The first value of each fuzzed kwarg, and the kwargs bound to dims."""
    first = {name: candidates[0] for name, candidates in op.shapes.kwargs}
    return resolve(op, dims, first)[1]


def _shape(spec_dims: tuple[str | int, ...], dims: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(dims[d] if isinstance(d, str) else d for d in spec_dims)


def _bound(value: int | str | None, dims: Mapping[str, int], default: int) -> int:
    if value is None:
        return default
    return evaluate_int(value, dims) if isinstance(value, str) else value


def make_input(
    spec: InputSpec, dims: Mapping[str, int], dtype: str, rng: np.random.Generator, table_seed: int = 0
) -> np.ndarray:
    shape = _shape(spec.dims, dims)
    target = dtypes.info(spec.dtype or dtype).numpy
    if spec.kind is ValueKind.INDEX:
        return rng.integers(_bound(spec.low, dims, 0), _bound(spec.high, dims, 1), size=shape).astype(target)
    if spec.kind in (ValueKind.COS, ValueKind.SIN):  # one angle table for the trial's cos and sin
        angles = np.random.default_rng(table_seed).uniform(-np.pi, np.pi, size=shape)
        return (np.cos(angles) if spec.kind is ValueKind.COS else np.sin(angles)).astype(target)
    if spec.kind is ValueKind.AFFINE_WEIGHT:
        values = 1.0 + 0.1 * rng.standard_normal(shape)
    elif spec.kind is ValueKind.COS_SIN:
        values = rng.uniform(-1.0, 1.0, size=shape)
    elif spec.kind is ValueKind.POSITIVE:
        values = np.abs(rng.standard_normal(shape)) + 2.0**-4
    else:
        values = rng.standard_normal(shape)
    return values.astype(target)


def load_callable(spec: str) -> Callable[..., Any]:
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def _reference_inputs(inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {
        name: a.astype(np.float64) if dtypes.is_float_dtype(a.dtype) else a.copy()
        for name, a in inputs.items()
    }


def _call_op(op: OpSpec, inputs: Mapping[str, np.ndarray], kwargs: Mapping[str, Any]) -> Any:
    """The op on the inputs, as torch tensors for `framework = "torch"` ops (Triton kernels run in Triton's
    interpreter, plain, as a CPU test of them would run)."""
    if op.targets.framework.value != "torch":
        return load_callable(op.targets.op)(**inputs, **kwargs)
    import os

    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the op's module imports Triton
    from gpuemu_ci.backends.frameworks import get_bridge, to_numpy_outputs

    bridge = get_bridge(op.targets.framework)  # bfloat16 arrays as torch.bfloat16 tensors, and back
    result = load_callable(op.targets.op)(
        **{n: bridge.to_native(a).value for n, a in inputs.items()}, **kwargs
    )
    outputs = to_numpy_outputs(result)
    return outputs[0] if len(outputs) == 1 else outputs


def run_trial(op: OpSpec, dtype: str, dims: Mapping[str, int], rng: np.random.Generator) -> str | None:
    """One trial; returns why it failed, or None when allclose held."""
    table_seed = int(rng.integers(2**31))
    inputs = {spec.name: make_input(spec, dims, dtype, rng, table_seed) for spec in op.shapes.inputs}
    kwargs = benchmark_kwargs(op, dims)
    if op.backward is not None:
        from oneshape_gradcheck import run_backward_trial  # torch is needed for backward entries only

        return run_backward_trial(op, dtype, inputs, kwargs, rng)
    out_dtype = dtypes.info(op.output_dtype or dtype).numpy
    with np.errstate(all="ignore"):
        reference = np.asarray(load_callable(op.targets.reference)(**_reference_inputs(inputs), **kwargs))
        call_kwargs = dict(kwargs)
        buffer = None
        if op.execution.out_arg:
            buffer = np.zeros(reference.shape, dtype=out_dtype)
            call_kwargs[op.execution.out_arg] = buffer
        try:
            result = _call_op(op, inputs, call_kwargs)
        except Exception as exc:  # a kernel that raises fails the trial, as in KernelBench
            return f"raised {type(exc).__name__}: {exc}"
        out = np.asarray(buffer if result is None else result)
        if (
            op.error_model.family is Family.ARGMAX
        ):  # the reference's scores, compared like torch.argmax outputs
            expected_index = np.argmax(reference, axis=-1)
            if out.shape != expected_index.shape or not np.array_equal(out, expected_index):
                return "argmax differs from the reference's"
            return None
        if out.shape != reference.shape:
            return f"shape {out.shape} != {reference.shape}"
        expected = reference.astype(out_dtype).astype(np.float64)
        tol = TOLERANCE.get(dtype, 1e-4)
        if not np.allclose(out.astype(np.float64), expected, atol=tol, rtol=tol):
            worst = float(np.nanmax(np.abs(out.astype(np.float64) - expected), initial=0.0))
            return (
                f"allclose({tol:g}) failed, max |error| {worst:.3g}"
                if math.isfinite(worst)
                else f"allclose({tol:g}) failed (non-finite output)"
            )
    return None


def judge_entry(op: OpSpec, dtypes_to_run: tuple[str, ...], master_seed: int) -> BaselineVerdict:
    """TRIALS trials per dtype at the benchmark shape; caught when any trial fails."""
    dims = benchmark_dims(op)
    for dtype in dtypes_to_run:
        for trial in range(TRIALS):
            rng = np.random.default_rng([master_seed, trial])
            why = run_trial(op, dtype, dims, rng)
            if why is not None:
                return BaselineVerdict(True, f"{dtype} trial {trial} at {dims}: {why}")
    return BaselineVerdict(False, f"all {TRIALS} trials passed at {dims} ({', '.join(dtypes_to_run)})")
