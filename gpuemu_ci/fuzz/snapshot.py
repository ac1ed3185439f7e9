"""A case pinned by a file: the snapshot of a failing case, a capture of a real call (shadow), a corpus entry.
Its inputs are exactly the file's logical arrays in the layouts (or, for a capture, the element strides) it
records, with its dims and kwargs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gpuemu_ci.config.model import Layout, OpSpec
from gpuemu_ci.errors import UsageError
from gpuemu_ci.fuzz import layouts as layout_mod
from gpuemu_ci.fuzz.case import CaseInputs, rebuild_from_snapshot
from gpuemu_ci.fuzz.digest import inputs_digest
from gpuemu_ci.fuzz.values import GENERATOR_VERSION
from gpuemu_ci.plan.model import CaseStratum, SizeClass, ValueMode
from gpuemu_ci.results.snapshots import read_snapshot


def case_from_snapshot(op: OpSpec, path: Path) -> CaseInputs:
    """Rebuilds a case from its .npz: the exact logical inputs, layouts (or, for a capture of a real call, the
    exact element strides), dims and kwargs that failed."""
    arrays, meta = read_snapshot(path)
    if meta["op"] != op.name:
        raise UsageError(f"snapshot {path} is of op {meta['op']!r}, not {op.name!r}")
    # The snapshot is data from anywhere (read_snapshot checked its fields' types): whatever does not fit
    # together is its fault, said plainly.
    try:
        if meta["dtype"] not in op.dtypes:
            raise ValueError(f"dtype {meta['dtype']!r} is not one of the op's dtypes {list(op.dtypes)}")
        strides = meta.get("strides")
        if isinstance(strides, dict):  # a capture: the strides the real call had
            laid_out = {
                name: with_strides(values, tuple(strides.get(name, ()))) for name, values in arrays.items()
            }
            layouts = {name: classify_layout(array) for name, array in laid_out.items()}
        else:
            layouts = {
                name: layout_mod.LayoutChoice(Layout(info["layout"]), info.get("broadcast_dim"))
                for name, info in meta.get("layouts", {}).items()
            }
            if set(layouts) != set(arrays):
                raise ValueError(f"its layouts are for {sorted(layouts)} but it holds {sorted(arrays)}")
            laid_out = rebuild_from_snapshot(arrays, layouts)
        size_class = SizeClass(meta.get("size_class") or SizeClass.BOUNDARY.value)
        chosen = CaseStratum(meta["dtype"], ValueMode(meta["mode"]), size_class, contiguous=False)
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise UsageError(f"snapshot {path} does not describe a case of op {op.name!r}: {exc}") from None
    return CaseInputs(
        seed=meta["case_seed"],
        stratum=chosen,
        dims=meta.get("dims", {}),
        kwargs=meta.get("kwargs", {}),
        logical=arrays,
        layouts=layouts,
        arrays=laid_out,
    )


def with_strides(values: np.ndarray, strides: tuple[int, ...]) -> np.ndarray:
    """`values` laid out in memory with these element strides (gaps poisoned with NaN, stride 0 shared); C
    order when the strides do not fit the shape or are negative."""
    if len(strides) != values.ndim or any(s < 0 for s in strides) or values.size == 0:
        return values
    extent = 1 + sum((n - 1) * s for n, s in zip(values.shape, strides, strict=True))
    base = (
        np.full(extent, np.nan, dtype=values.dtype)
        if values.dtype.kind == "f"
        else np.zeros(extent, values.dtype)
    )
    view = np.lib.stride_tricks.as_strided(
        base, values.shape, tuple(s * values.itemsize for s in strides), writeable=True
    )
    view[...] = values  # where strides overlap (stride 0), the values along that dim are one value anyway
    return view


def classify_layout(array: np.ndarray) -> layout_mod.LayoutChoice:
    """What the oracle and reports need to know of a real array's layout."""
    strides = tuple(s // array.itemsize for s in array.strides) if array.itemsize else ()
    if 0 in strides and array.size > 1:
        return layout_mod.LayoutChoice(Layout.BROADCAST, strides.index(0))
    if array.flags.c_contiguous:
        return layout_mod.LayoutChoice(Layout.CONTIGUOUS, None)
    if array.ndim >= 2 and array.T.flags.c_contiguous:
        return layout_mod.LayoutChoice(Layout.TRANSPOSED, None)
    return layout_mod.LayoutChoice(Layout.STRIDED, None)


def snapshot_meta(case: CaseInputs, op_name: str, case_index: int, master_seed: int) -> dict[str, Any]:
    """What a snapshot records besides the inputs: enough to rebuild the case (`case_from_snapshot`) and
    replay it, and the digest of the inputs it was judged on."""
    return {
        "op": op_name,
        "case_seed": case.seed,
        "case_index": case_index,
        "master_seed": master_seed,
        "generator_version": GENERATOR_VERSION,
        "dtype": case.dtype,
        "mode": case.stratum.mode.value,
        "size_class": case.stratum.size_class.value,
        "dims": dict(case.dims),
        "kwargs": dict(case.kwargs),
        "layouts": {
            name: {"layout": c.layout.value, "broadcast_dim": c.broadcast_dim}
            for name, c in case.layouts.items()
        },
        "input_order": list(case.logical),
        "inputs_digest": inputs_digest(case),
    }
