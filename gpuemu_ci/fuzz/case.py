"""A case seed -> everything the op receives: dims, kwargs, layouts and the input arrays.

The derivation follows upstream's seed tree: `it = SeededRng(case_seed)`, then `it.derive("shape")`,
`it.derive("layout")`, `it.derive("data").derive(f"input_{i}")`, plus `it.derive("kwargs")` for fuzzed
kwargs. The stratum (dtype, value mode, alignment, contiguity) is a function of the seed (plan/expand.py), so a
case seed and the op's config replay a case byte for byte.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.config.model import Family, Layout, OpSpec
from gpuemu_ci.errors import ConfigError
from gpuemu_ci.fuzz import layouts as layout_mod
from gpuemu_ci.fuzz.shapes import draw_dims, shape_of
from gpuemu_ci.fuzz.values import generate
from gpuemu_ci.plan.expand import stratum
from gpuemu_ci.plan.model import CaseStratum
from gpuemu_ci.rng import SeededRng


@dataclass(frozen=True)
class CaseInputs:
    seed: int
    stratum: CaseStratum
    dims: Mapping[str, int]
    kwargs: Mapping[str, Any]
    logical: Mapping[str, np.ndarray]  # C-contiguous values (what the reference sees, before fp64)
    layouts: Mapping[str, layout_mod.LayoutChoice]
    arrays: Mapping[str, np.ndarray]  # what the op receives (real layouts)

    @property
    def dtype(self) -> str:
        return self.stratum.dtype

    def describe(self) -> dict[str, Any]:
        """Shapes, element strides and layouts for reports."""
        return {
            "shapes": {name: tuple(a.shape) for name, a in self.arrays.items()},
            "strides": {name: tuple(layout_mod.element_strides(a)) for name, a in self.arrays.items()},
            "layouts": {name: choice.layout.value for name, choice in self.layouts.items()},
        }


def draw_kwargs(op: OpSpec, rng: SeededRng) -> dict[str, Any]:
    return {name: rng.derive(name).choice(list(candidates)) for name, candidates in op.shapes.kwargs}


def build_case(
    op: OpSpec,
    seed: int,
    root: Path,
    dims_override: Mapping[str, int] | None = None,
    value_scale: float | None = None,
) -> CaseInputs:
    """Materialises a case. `dims_override` and `value_scale` are used by the minimizer only."""
    it = SeededRng(seed)
    chosen = stratum(op, seed)
    dims = (
        dict(dims_override)
        if dims_override is not None
        else draw_dims(op, it.derive("shape"), chosen.aligned)
    )
    kwargs = draw_kwargs(op, it.derive("kwargs"))
    data = it.derive("data")
    if op.targets.inputs_hook:
        logical = _from_hook(op, data, dims, chosen.dtype, kwargs, root)
    else:
        logical = {}
        for index, spec in enumerate(op.shapes.inputs):
            shape = shape_of(spec.dims, dims)
            logical[spec.name] = generate(
                spec,
                shape,
                spec.dtype or chosen.dtype,
                chosen.mode,
                data.derive(f"input_{index}"),
                dims,
                op.error_model.nonfinite,
                tame=op.error_model.family is Family.ATTENTION,
            )
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
            tuple(allowed), tuple(values.shape), chosen.contiguous, layout_rng.derive(f"input_{index}")
        )
        values = layout_mod.broadcast_source(values, choice)
        logical[name] = values
        layouts[name] = choice
        arrays[name] = layout_mod.materialize(values, choice)
    return CaseInputs(seed, chosen, dims, kwargs, logical, layouts, arrays)


def rebuild_from_snapshot(
    logical: Mapping[str, np.ndarray], layouts: Mapping[str, layout_mod.LayoutChoice]
) -> dict[str, np.ndarray]:
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


def _from_hook(
    op: OpSpec, rng: SeededRng, dims: Mapping[str, int], dtype: str, kwargs: Mapping[str, Any], root: Path
) -> dict[str, np.ndarray]:
    """`inputs = "pkg.mod:make_inputs"`: the user's generator gets the case's rng (replayable), dims, dtype and
    kwargs, and returns a dict of arrays. It runs in the worker processes, with the rest of the user code."""
    from gpuemu_ci.backends.loading import LoadError, load_callable

    try:
        hook = load_callable(op.targets.inputs_hook or "", root)
    except LoadError as exc:
        raise InputsHookError(
            f"op {op.name!r}: inputs hook does not load: {exc}", op.line, loaded=False
        ) from None
    try:
        produced = hook(rng=rng, dims=dict(dims), dtype=dtype, kwargs=dict(kwargs))
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
    return {str(k): np.ascontiguousarray(v) for k, v in produced.items()}


__all__ = ["CaseInputs", "InputsHookError", "Layout", "build_case", "draw_kwargs", "rebuild_from_snapshot"]
