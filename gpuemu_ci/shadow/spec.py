"""The op a shadow checker judges: one declared in gpuemu.toml (found from the working directory, or given), or
one described by arguments (a reference and a family) for an op the config does not declare."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from gpuemu_ci.config.load import load_config
from gpuemu_ci.config.model import (
    Config,
    DimSpec,
    ErrorModel,
    Family,
    Framework,
    InputSpec,
    OpShapes,
    OpSpec,
    OpTargets,
    Validation,
)
from gpuemu_ci.errors import UsageError
from gpuemu_ci.pipeline.settings import select_ops

ShadowOp = tuple[OpSpec, Path, Validation, Callable[..., Any] | None]


def resolve_op(
    op: str | None,
    *,
    config: str | Path | Config | None,
    reference: Callable[..., Any] | str | None,
    family: str | None,
    inputs: Mapping[str, tuple[str | int, ...]] | None,
) -> ShadowOp:
    """(op spec, root for imports, validation settings, the reference as a callable when given as one)."""
    if reference is None:
        if op is None:
            raise UsageError("shadow needs the name of an op in gpuemu.toml, or a reference and a family")
        loaded = config if isinstance(config, Config) else load_config(Path(config) if config else None)
        spec = select_ops(loaded, [op])[0]
        # The checker judges outputs already computed: inputs reach the reference as NumPy whatever the op takes.
        return _as_numpy(spec), loaded.root, loaded.validation, None
    if family is None:
        raise UsageError("a shadowed op that gpuemu.toml does not declare needs `family` (its error model)")
    try:
        chosen = Family(family)
    except ValueError:
        raise UsageError(f"unknown family {family!r}; one of {', '.join(f.value for f in Family)}") from None
    if chosen not in (Family.ELEMENTWISE, Family.EXACT) and not inputs:
        raise UsageError(
            f"family {family!r} needs `inputs` ({{name: dims}}): its error bound depends on them"
        )
    declared = dict(inputs or {})
    names = {d for dims in declared.values() for d in dims if isinstance(d, str)}
    spec = OpSpec(
        name=op or str(getattr(reference, "__name__", "shadowed")),
        dtypes=("float32",),
        targets=OpTargets(
            op="<shadowed>", reference=reference if isinstance(reference, str) else "<callable>"
        ),
        shapes=OpShapes(
            inputs=tuple(InputSpec(name, tuple(dims)) for name, dims in declared.items()),
            dims=tuple(DimSpec(name, (1,), low=0, high=2**62) for name in sorted(names)),
        ),
        error_model=ErrorModel(family=chosen),
    )
    function = None if isinstance(reference, str) else reference
    return spec, Path.cwd(), Validation(), function


def dims_of(op: OpSpec, inputs: Mapping[str, np.ndarray]) -> dict[str, int] | None:
    """Each symbolic dim's size in this call, from the shapes of the declared inputs; None when the call does
    not fit the declared schema (a missing input, another rank, one dim with two sizes)."""
    dims: dict[str, int] = {}
    for spec in op.shapes.inputs:
        array = inputs.get(spec.name)
        if array is None or array.ndim != len(spec.dims):
            return None
        for dim, size in zip(spec.dims, array.shape, strict=True):
            if isinstance(dim, int):
                if dim != size:
                    return None
            elif dims.setdefault(dim, size) != size:
                return None
    return dims


def _as_numpy(op: OpSpec) -> OpSpec:
    from dataclasses import replace

    return replace(op, targets=replace(op.targets, framework=Framework.NUMPY))
