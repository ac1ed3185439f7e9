"""A case seed -> everything the op receives: dims, kwargs, layouts and the input arrays.

The derivation follows upstream's seed tree: `it = SeededRng(case_seed)`, then `it.derive("shape")`,
`it.derive("layout")`, `it.derive("data").derive(f"input_{i}")`. The stratum (dtype, value mode, size class,
contiguity, and the counter that picks the tile rung, the kwargs and the large variant) is a function of the
seed (plan/expand.py), so a case seed and the op's config replay a case byte for byte.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.config.model import Family, InputSpec, Layout, OpSpec, ValueKind
from gpuemu_ci.errors import ConfigError
from gpuemu_ci.fuzz import layouts as layout_mod
from gpuemu_ci.fuzz.large import LargeSkip, large_draw, memory_shortfall
from gpuemu_ci.fuzz.shapes import CapChange, DimDraw, draw, resolve, shape_of
from gpuemu_ci.fuzz.values import generate
from gpuemu_ci.plan.expand import stratum
from gpuemu_ci.plan.model import CaseStratum, SizeClass, ValueMode
from gpuemu_ci.rng import SeededRng

# Kinds whose rows are one value: a broadcast along the row would break what the kind promises.
# Imports an inputs hook: ("pkg.mod:function", the config's directory) -> the function; raises when it cannot.
HookLoader = Callable[[str, Path], Callable[..., Any]]
ROW_KINDS = frozenset({ValueKind.PROBABILITIES, ValueKind.LOG_PROBABILITIES, ValueKind.COS, ValueKind.SIN})


class CaseSkipped(Exception):
    """A case this machine cannot run (a large-size case that does not fit in memory); the reason is shown in
    the results' coverage. Never a pass and never a failure."""

    def __init__(self, seed: int, stratum: CaseStratum, reason: str) -> None:
        super().__init__(reason)
        self.seed = seed
        self.stratum = stratum
        self.reason = reason


@dataclass(frozen=True)
class CaseInputs:
    """One case's inputs, built from its seed: the dims and kwargs drawn, each input's values in C order (what
    the reference sees) and as the op receives them (its drawn layout), and the sizes the element cap
    shrank."""

    seed: int
    stratum: CaseStratum
    dims: Mapping[str, int]
    kwargs: Mapping[str, Any]
    logical: Mapping[str, np.ndarray]  # C-contiguous values (what the reference sees, before fp64)
    layouts: Mapping[str, layout_mod.LayoutChoice]
    arrays: Mapping[str, np.ndarray]  # what the op receives (real layouts)
    capped: tuple[CapChange, ...] = field(default=())  # tool-chosen sizes the element cap shrank

    @property
    def dtype(self) -> str:
        """The case's dtype name."""
        return self.stratum.dtype

    def describe(self) -> dict[str, Any]:
        """Shapes, element strides and layouts for reports."""
        return {
            "shapes": {name: tuple(a.shape) for name, a in self.arrays.items()},
            "strides": {name: tuple(layout_mod.element_strides(a)) for name, a in self.arrays.items()},
            "layouts": {name: choice.layout.value for name, choice in self.layouts.items()},
        }


def draw_kwargs(op: OpSpec, seed: int) -> dict[str, Any]:
    """The kwargs of a case (fuzzed ones and those bound to its dims)."""
    return dict(_draw(op, seed, stratum(op, seed)).kwargs)


def case_dims(op: OpSpec, seed: int) -> dict[str, int]:
    """The dims of a case, without making its inputs: the same on every machine (shards are dealt by them).
    Raises CaseSkipped only for a large case the declared ranges cannot make."""
    return dict(_draw(op, seed, stratum(op, seed)).dims)


def _draw(op: OpSpec, seed: int, chosen: CaseStratum) -> DimDraw:
    """The case's dims and kwargs: a function of the seed and the op's config alone, never of this machine."""
    shape_rng = SeededRng(seed).derive("shape")
    if chosen.size_class is not SizeClass.LARGE:
        return draw(op, shape_rng, chosen)
    large = large_draw(op, shape_rng, chosen)
    if isinstance(large, LargeSkip):
        raise CaseSkipped(seed, chosen, large.reason)
    return large


def _check_fits(op: OpSpec, seed: int, chosen: CaseStratum, dims: Mapping[str, int]) -> None:
    """Raises CaseSkipped when this machine's free memory cannot hold the case. The user's typical sizes and
    literal dims are never capped: a case too large here is skipped and said, not allocated until the machine
    runs out (and never made smaller: its inputs would no longer be its seed's)."""
    reason = memory_shortfall(op, dims, chosen.dtype)
    if reason is not None:
        prefix = (
            "typical sizes" if chosen.size_class is SizeClass.TYPICAL else f"{chosen.size_class.value} sizes"
        )
        raise CaseSkipped(seed, chosen, f"{prefix}: {reason}")


def build_case(
    op: OpSpec,
    seed: int,
    root: Path,
    dims_override: Mapping[str, int] | None = None,
    value_scale: float | None = None,
    load: HookLoader | None = None,
) -> CaseInputs:
    """Materialises a case (fuzz/inputs.case_inputs is the entry point for everything that runs cases).
    `dims_override` (drawn dims; derived dims follow) and `value_scale` are used by the minimizer only; `load`
    imports the op's inputs hook (backends.loading.load_callable in the workers). Raises CaseSkipped for a case
    the machine's memory cannot hold."""
    it = SeededRng(seed)
    chosen = stratum(op, seed)
    if dims_override is not None:
        fuzzed = _draw(op, seed, chosen).kwargs if op.shapes.kwargs else {}
        dims, kwargs, problems = resolve(op, dims_override, fuzzed)
        if problems:
            raise ValueError(f"these dims make no valid case: {problems[0].message}")
        capped: tuple[CapChange, ...] = ()
    else:
        drawn = _draw(op, seed, chosen)
        dims, kwargs, capped = drawn.dims, drawn.kwargs, drawn.capped
    _check_fits(op, seed, chosen, dims)
    data = it.derive("data")
    if op.targets.inputs_hook:
        logical = _from_hook(op, data, dims, chosen, kwargs, root, load)
    else:
        logical = {}
        for index, spec in enumerate(op.shapes.inputs):
            logical[spec.name] = _generate(op, spec, index, dims, chosen, data.derive(f"input_{index}"), data)
    if value_scale is not None:
        logical = {name: _scaled(a, value_scale) for name, a in logical.items()}
    layout_rng = it.derive("layout")
    layouts: dict[str, layout_mod.LayoutChoice] = {}
    arrays: dict[str, np.ndarray] = {}
    specs = {spec.name: spec for spec in op.shapes.inputs}
    for index, (name, values) in enumerate(logical.items()):
        declared = specs.get(name)
        allowed = (
            declared.layouts if declared is not None and declared.layouts else None
        ) or op.shapes.layouts
        choice = layout_mod.choose(
            tuple(allowed),
            tuple(values.shape),
            chosen.contiguous,
            layout_rng.derive(f"input_{index}"),
            whole_rows=declared is not None and declared.kind in ROW_KINDS,
        )
        values = layout_mod.broadcast_source(values, choice)
        logical[name] = values
        layouts[name] = choice
        arrays[name] = layout_mod.materialize(values, choice)
    return CaseInputs(seed, chosen, dims, kwargs, logical, layouts, arrays, capped)


def _generate(
    op: OpSpec,
    spec: InputSpec,
    index: int,
    dims: Mapping[str, int],
    chosen: CaseStratum,
    rng: SeededRng,
    data: SeededRng,
) -> np.ndarray:
    return generate(
        spec,
        shape_of(spec.dims, dims),
        spec.dtype or chosen.dtype,
        chosen.mode,
        rng,
        dims,
        op.error_model.nonfinite,
        tame=op.error_model.family is Family.ATTENTION,
        shared=data.derive("shared"),
        primary=index == 0,
    )


def rebuild_from_snapshot(
    logical: Mapping[str, np.ndarray], layouts: Mapping[str, layout_mod.LayoutChoice]
) -> dict[str, np.ndarray]:
    """The op's arrays rebuilt from a snapshot's logical values and layouts: what the op received when the
    case ran."""
    return {name: layout_mod.materialize(values, layouts[name]) for name, values in logical.items()}


def _scaled(values: np.ndarray, scale: float) -> np.ndarray:
    if not dtypes.is_float_dtype(values.dtype):
        return values
    return (values.astype(np.float64) * scale).astype(values.dtype)


class InputsHookError(ConfigError):
    """The inputs hook does not load (`loaded` False), raised, or returned something else than arrays."""

    def __init__(self, message: str, line: int | None, *, loaded: bool) -> None:
        super().__init__(message, line=line)
        self.loaded = loaded


def value_generator(
    op: OpSpec, dims: Mapping[str, int], chosen: CaseStratum, data: SeededRng
) -> Callable[..., np.ndarray]:
    """The `generate` helper an inputs hook receives: a tensor of any shape in the case's value mode.

    `generate(shape, dtype=None, kind="any", low=None, high=None, name=None)`: `dtype` defaults to the case's,
    `kind` is an input kind (`"probabilities"`, `"index"` with `high`, ...), and `name` picks the stream (calls
    with the same name give the same values; by default the n-th call has its own)."""
    calls = [0]

    def generate_tensor(
        shape: tuple[int, ...] | list[int],
        dtype: str | None = None,
        kind: str = "any",
        low: int | None = None,
        high: int | None = None,
        name: str | None = None,
    ) -> np.ndarray:
        key = name if name is not None else f"call_{calls[0]}"
        calls[0] += 1
        spec = InputSpec(key, tuple(int(s) for s in shape), dtype, ValueKind(kind), low, high)
        return _generate(
            op, spec, 0 if calls[0] == 1 else 1, dims, chosen, data.derive("hook").derive(key), data
        ).reshape(tuple(int(s) for s in shape))

    return generate_tensor


def _from_hook(
    op: OpSpec,
    rng: SeededRng,
    dims: Mapping[str, int],
    chosen: CaseStratum,
    kwargs: Mapping[str, Any],
    root: Path,
    load: HookLoader | None,
) -> dict[str, np.ndarray]:
    """`inputs_hook = "pkg.mod:make_inputs"`: the user's generator gets the case's rng (replayable), dims, dtype
    and kwargs, and, when it accepts them, the case's value `mode` and a `generate` helper that makes a tensor
    in that mode. It returns a dict of arrays (layouts are applied to them afterwards, as to any input). It runs
    in the worker processes, with the rest of the user code, which `load` imports."""
    if load is None:
        raise InputsHookError(
            f"op {op.name!r}: inputs hook {op.targets.inputs_hook!r} given no loader (an internal error)",
            op.line,
            loaded=False,
        )
    try:
        hook = load(op.targets.inputs_hook or "", root)
    except Exception as exc:  # the loader's LoadError: the hook does not import or is not a function
        raise InputsHookError(
            f"op {op.name!r}: inputs hook does not load: {exc}", op.line, loaded=False
        ) from None
    arguments: dict[str, Any] = {
        "rng": rng,
        "dims": dict(dims),
        "dtype": chosen.dtype,
        "kwargs": dict(kwargs),
    }
    extra = {"mode": chosen.mode.value, "generate": value_generator(op, dims, chosen, rng)}
    arguments.update({k: v for k, v in extra.items() if _accepts(hook, k)})
    try:
        produced = hook(**arguments)
    except BaseException as exc:  # user code, sys.exit() included: the case's failure, not the gate's exit
        raise InputsHookError(
            f"op {op.name!r}: inputs hook {op.targets.inputs_hook!r} failed: {type(exc).__name__}: {exc}",
            op.line,
            loaded=True,
        ) from None
    if not isinstance(produced, Mapping) or not all(isinstance(v, np.ndarray) for v in produced.values()):
        raise InputsHookError(
            f"op {op.name!r}: inputs hook {op.targets.inputs_hook!r} must return a dict of NumPy arrays",
            op.line,
            loaded=True,
        )
    result = {str(k): np.ascontiguousarray(v) for k, v in produced.items()}
    _check_declared_shapes(op, result, dims)
    return result


def _accepts(hook: Callable[..., Any], name: str) -> bool:
    try:
        parameters = inspect.signature(hook).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def _check_declared_shapes(op: OpSpec, produced: Mapping[str, np.ndarray], dims: Mapping[str, int]) -> None:
    """Inputs declared next to a hook (`[ops.inputs]` with `inputs_hook`) must come back with their shapes: the
    oracle reads the bound's lengths and scales from them."""
    for spec in op.shapes.inputs:
        if spec.name not in produced:
            continue
        expected = shape_of(spec.dims, dims)
        if tuple(produced[spec.name].shape) != expected:
            raise InputsHookError(
                f"op {op.name!r}: inputs hook returned `{spec.name}` with shape {tuple(produced[spec.name].shape)}, "
                f"but [ops.inputs] declares {list(spec.dims)} = {expected}",
                op.line,
                loaded=True,
            )


__all__ = [
    "CaseInputs",
    "CaseSkipped",
    "HookLoader",
    "InputsHookError",
    "Layout",
    "ValueMode",
    "build_case",
    "case_dims",
    "draw_kwargs",
    "rebuild_from_snapshot",
]
