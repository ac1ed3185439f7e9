"""Re-running one case: from its seed (optionally at other dims or value scale) or from its saved snapshot."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpuemu_ci.backends.interface import CallTarget
from gpuemu_ci.config.model import Layout, OpSpec
from gpuemu_ci.errors import UsageError
from gpuemu_ci.fuzz import layouts as layout_mod
from gpuemu_ci.fuzz.case import CaseInputs, build_case, rebuild_from_snapshot
from gpuemu_ci.fuzz.values import GENERATOR_VERSION
from gpuemu_ci.oracle.model import CaseVerdict
from gpuemu_ci.pipeline.records import CaseOutcome
from gpuemu_ci.pipeline.session import Session
from gpuemu_ci.plan.model import CaseRef, CaseStratum, ValueMode
from gpuemu_ci.results.snapshots import read_snapshot


@dataclass(frozen=True)
class ReplayOutcome:
    case: CaseInputs
    verdict: CaseVerdict | None  # None: the reference failed, so the case could not be judged
    message: str
    outcome: CaseOutcome

    @property
    def failed(self) -> bool:
        return self.verdict is None or not self.verdict.passed


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
        chosen = CaseStratum(meta["dtype"], ValueMode(meta["mode"]), aligned=False, contiguous=False)
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


def describe_outcome(outcome: CaseOutcome) -> str:
    if outcome.verdict is None:
        failed = outcome.run.reference
        return f"could not judge: the reference {failed.status.value}: {failed.message}"
    if outcome.verdict.passed:
        stats = outcome.verdict.stats
        headroom = (
            f" (worst error {stats.headroom:.3g}x of allowed)" if stats and stats.headroom is not None else ""
        )
        return "passed" + headroom
    return "\n".join(f"{f.kind.value}: {f.message}" for f in outcome.verdict.findings)


def replay(
    session: Session,
    op: OpSpec,
    *,
    seed: int | None = None,
    snapshot: Path | None = None,
    dims: Mapping[str, int] | None = None,
    scale: float | None = None,
    generator_version: str | None = None,
    target: CallTarget | None = None,
) -> ReplayOutcome:
    if snapshot is not None:
        case = case_from_snapshot(op, snapshot)
    else:
        if seed is None:
            raise UsageError("replay needs --seed or --snapshot")
        if generator_version is not None and generator_version != GENERATOR_VERSION:
            raise UsageError(
                f"these results were generated by input generator version {generator_version}; this gpuemu-ci "
                f"has version {GENERATOR_VERSION}, so the seed would not give the same inputs. Replay from the "
                "snapshot (--snapshot), or install the gpuemu-ci that wrote the results."
            )
        if dims is not None:
            _check_dims(op, dims)
        case = build_case(op, seed, session.config.root, dims_override=dims, value_scale=scale)
    return run_inputs(session, op, case, target)


def run_inputs(
    session: Session, op: OpSpec, case: CaseInputs, target: CallTarget | None = None
) -> ReplayOutcome:
    """Runs and judges exactly these inputs (with `target` instead of the op's own, when given)."""
    outcome = session.run_case(op, CaseRef(op.name, -1, case.seed), inputs=case, target=target)
    return ReplayOutcome(case, outcome.verdict, describe_outcome(outcome), outcome)


def _check_dims(op: OpSpec, dims: Mapping[str, int]) -> None:
    names = {d.name for d in op.shapes.dims}
    unknown = set(dims) - names
    if unknown:
        raise UsageError(f"--dims names {sorted(unknown)}, which op {op.name!r} does not declare")
    missing = names - set(dims)
    if missing:
        raise UsageError(f"--dims must give every dim of op {op.name!r}; missing {sorted(missing)}")
