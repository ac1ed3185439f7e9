"""Re-running one case: from its seed (optionally at other dims or value scale), from its saved snapshot, or
exactly given inputs (the minimizer's). The session's workers generate (or load) the inputs themselves."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpuemu_ci.backends.interface import CallTarget, CaseReport, CaseSpec
from gpuemu_ci.config.model import Layout, OpSpec
from gpuemu_ci.errors import UsageError
from gpuemu_ci.fuzz import layouts as layout_mod
from gpuemu_ci.fuzz.case import CaseInputs, rebuild_from_snapshot
from gpuemu_ci.fuzz.values import GENERATOR_VERSION
from gpuemu_ci.pipeline.session import Session
from gpuemu_ci.plan.model import CaseStratum, SizeClass, ValueMode
from gpuemu_ci.results.model import FailureKind
from gpuemu_ci.results.snapshots import read_snapshot, write_snapshot


@dataclass(frozen=True)
class ReplayOutcome:
    seed: int
    report: CaseReport
    message: str

    @property
    def failed(self) -> bool:
        """The case did not pass (a wrong answer, or it could not be judged)."""
        return self.report.outcome != "passed"

    @property
    def kind(self) -> FailureKind | None:
        """How a judged case failed (None: it passed, or could not be judged)."""
        if self.report.outcome != "failed" or self.report.kind not in {k.value for k in FailureKind}:
            return None
        return FailureKind(self.report.kind)


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


def describe_outcome(report: CaseReport) -> str:
    if report.outcome == "errored":
        return f"could not judge: {report.message}"
    if report.outcome == "unloadable":
        return f"the {report.unloadable or 'op'} could not be loaded: {report.message}"
    if report.outcome == "passed":
        headroom = f" (worst error {report.headroom:.3g}x of allowed)" if report.headroom is not None else ""
        return "passed" + headroom
    return "\n".join(f"{kind}: {message}" for kind, message in report.findings)


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
    """Re-runs one case in the session's workers (with `target` instead of the op's own, when given)."""
    if snapshot is not None:
        seed = case_from_snapshot(op, snapshot).seed  # a bad snapshot is refused here, before any worker runs
        case = CaseSpec(seed, snapshot=snapshot.resolve())
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
        case = CaseSpec(seed, dims=dims, scale=scale)
    report = session.run_case(op, case, target=target)
    return ReplayOutcome(seed, report, describe_outcome(report))


def run_inputs(
    session: Session, op: OpSpec, case: CaseInputs, target: CallTarget | None = None
) -> ReplayOutcome:
    """Runs and judges exactly these inputs: they travel to the workers as a snapshot (with their strides)."""
    from gpuemu_ci.backends.casework import snapshot_meta

    scratch = Path(tempfile.mkdtemp(prefix="gpuemu-inputs-"))
    try:
        meta = snapshot_meta(session.task(op), CaseSpec(case.seed), case)
        meta["strides"] = {name: list(layout_mod.element_strides(a)) for name, a in case.arrays.items()}
        path = scratch / write_snapshot(scratch, dict(case.logical), meta)
        report = session.run_case(op, CaseSpec(case.seed, snapshot=path), target=target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return ReplayOutcome(case.seed, report, describe_outcome(report))


def _check_dims(op: OpSpec, dims: Mapping[str, int]) -> None:
    names = {d.name for d in op.shapes.dims}
    unknown = set(dims) - names
    if unknown:
        raise UsageError(f"--dims names {sorted(unknown)}, which op {op.name!r} does not declare")
    missing = {d.name for d in op.shapes.dims if not d.is_derived} - set(dims)
    if missing:
        raise UsageError(f"--dims must give every drawn dim of op {op.name!r}; missing {sorted(missing)}")
