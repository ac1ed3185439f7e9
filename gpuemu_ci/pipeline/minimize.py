"""Shrinking a failing case by actually running the op, until every part of it matters.

Passes, in order, each moving only to a case that still fails with the same kind of failure (a mismatch never
becomes a crash or a NaN on the way): each dim by binary search from the largest (shared dims change together,
as they are one symbol); each non-contiguous input made contiguous; every float input halved while it still
fails; every float input rounded to few significant bits. The result is saved as a snapshot, replayable with
`gpuemu-ci replay --snapshot`, and described in words."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.backends.loading import load_callable
from gpuemu_ci.config.model import Layout, OpSpec
from gpuemu_ci.errors import UsageError
from gpuemu_ci.fuzz import layouts as layout_mod
from gpuemu_ci.fuzz.case import CaseInputs, rebuild_from_snapshot
from gpuemu_ci.fuzz.inputs import case_inputs
from gpuemu_ci.fuzz.shapes import admissible
from gpuemu_ci.fuzz.snapshot import snapshot_meta
from gpuemu_ci.pipeline.replay import ReplayOutcome, replay, run_inputs
from gpuemu_ci.pipeline.session import Session
from gpuemu_ci.results.model import FailureKind
from gpuemu_ci.results.snapshots import write_snapshot

SIGNIFICANT_BITS = 3  # what the rounding pass keeps of each mantissa
MIN_SCALE = 2.0**-20


@dataclass(frozen=True)
class Minimized:
    """The smallest failing case found, and how it was reached."""

    seed: int
    kind: FailureKind
    output: str | None  # the failing output when not the forward's: "grad of x" (backward = true)
    original_dims: dict[str, int]
    dims: dict[str, int]
    made_contiguous: tuple[str, ...]  # inputs whose layout no longer mattered
    scale_exponent: int  # every float input multiplied by 2**scale_exponent (0: unchanged)
    rounded: bool  # float inputs rounded to SIGNIFICANT_BITS significant bits
    case: CaseInputs
    runs: int
    message: str
    snapshot: str  # relative to the session's output directory

    def in_words(self) -> str:
        """What the minimized case is, for a person."""
        changes = []
        shrunk = {k: v for k, v in self.dims.items() if v != self.original_dims.get(k)}
        if shrunk:
            changes.append(
                "dims " + ", ".join(f"{k} {self.original_dims[k]} -> {v}" for k, v in shrunk.items())
            )
        if self.made_contiguous:
            changes.append(f"{', '.join(self.made_contiguous)} made contiguous (the layout did not matter)")
        if self.scale_exponent:
            changes.append(
                f"float inputs scaled by 2^{self.scale_exponent} (~{2.0**self.scale_exponent:.3g})"
            )
        if self.rounded:
            changes.append(f"float inputs rounded to {SIGNIFICANT_BITS} significant bits")
        return "; ".join(changes) or "nothing could be removed: every part of the case matters"


def minimize(session: Session, op: OpSpec, seed: int, max_runs: int = 200) -> Minimized:
    """Shrinks the case `seed` of `op` (see the module docstring); a UsageError when it does not fail."""
    before = _snapshots(session.out_dir)  # what was there before: never removed
    first = replay(session, op, seed=seed)
    if first.kind is None:
        raise UsageError(f"case seed {seed} of op {op.name!r} passes: nothing to minimize")
    kind = first.kind
    probe = _Probe(session, op, kind, first.report.output, max_runs)

    drawn = {name: size for name, size in first.report.dims.items() if not _is_derived(op, name)}
    dims = _shrink_dims(probe, op, seed, dict(drawn), first.report.kwargs)
    # The layout and value passes change the inputs themselves: they are built here, then sent to the
    # workers as snapshots (replay.run_inputs).
    case = case_inputs(op, seed, session.config.root, load_callable, dims=dims)
    case, contiguous = _drop_layouts(probe, case)
    case, exponent = _scale_down(probe, case)
    case, rounded = _round(probe, case)

    final = run_inputs(session, op, case)
    meta = snapshot_meta(case, op.name, -1, session.settings.seed)
    relative = write_snapshot(session.out_dir, dict(case.logical), meta)
    _remove_intermediate_snapshots(session.out_dir, before, keep=relative)
    return Minimized(
        seed=seed,
        kind=kind,
        output=first.report.output,
        original_dims=dict(first.report.dims),
        dims=dict(case.dims),
        made_contiguous=contiguous,
        scale_exponent=exponent,
        rounded=rounded,
        case=case,
        runs=probe.runs + 1,
        message=final.message,
        snapshot=relative,
    )


def _snapshots(out_dir: Path) -> set[Path]:
    return set((out_dir / "snapshots").glob("*.npz"))


def _remove_intermediate_snapshots(out_dir: Path, before: set[Path], keep: str) -> None:
    """Every failing candidate on the way down wrote its snapshot; only the minimized case's is worth keeping."""
    final = out_dir / keep
    for path in _snapshots(out_dir) - before:
        if path != final:
            path.unlink(missing_ok=True)


class _Probe:
    """Runs candidates; True only for one that fails with the original kind, within the run budget."""

    def __init__(
        self, session: Session, op: OpSpec, kind: FailureKind, output: str | None, max_runs: int
    ) -> None:
        self.session, self.op, self.kind, self.max_runs = session, op, kind, max_runs
        self.output = output
        self.runs = 1

    @property
    def spent(self) -> bool:
        return self.runs >= self.max_runs

    def fails(self, case: CaseInputs) -> bool:
        if self.spent:
            return False
        self.runs += 1
        return _same_failure(run_inputs(self.session, self.op, case), self.kind, self.output)


def _same_failure(outcome: ReplayOutcome, kind: FailureKind, output: str | None) -> bool:
    """The same kind of failure of the same output (a gradient's failure stays that gradient's)."""
    return outcome.kind is kind and outcome.report.output == output


def _is_derived(op: OpSpec, name: str) -> bool:
    dim = op.shapes.dim(name)
    return dim is not None and dim.is_derived


def _shrink_dims(
    probe: _Probe, op: OpSpec, seed: int, dims: dict[str, int], kwargs: Mapping[str, object]
) -> dict[str, int]:
    """The drawn dims, each shrunk by binary search (derived dims follow them)."""
    lows = {d.name: max(d.low, 1) for d in op.shapes.dims}

    def fails(candidate: dict[str, int]) -> bool:
        if not admissible(op, candidate, kwargs) or probe.spent:
            return False
        probe.runs += 1  # from the seed: the workers generate the smaller case themselves
        return _same_failure(replay(probe.session, op, seed=seed, dims=candidate), probe.kind, probe.output)

    for name in sorted(dims, key=lambda n: -dims[n]):
        lo, hi = lows.get(name, 1), dims[name]
        while lo < hi and not probe.spent:
            mid = (lo + hi) // 2
            if fails({**dims, name: mid}):
                hi = mid
            else:
                lo = mid + 1
        dims[name] = hi
    return dims


def _drop_layouts(probe: _Probe, case: CaseInputs) -> tuple[CaseInputs, tuple[str, ...]]:
    made: list[str] = []
    for name, choice in case.layouts.items():
        if choice.layout is Layout.CONTIGUOUS:
            continue
        layouts = {**case.layouts, name: layout_mod.LayoutChoice(Layout.CONTIGUOUS, None)}
        candidate = _with_values(case, case.logical, layouts)
        if probe.fails(candidate):
            case = candidate
            made.append(name)
    return case, tuple(made)


def _scale_down(probe: _Probe, case: CaseInputs) -> tuple[CaseInputs, int]:
    exponent = 0
    while 2.0 ** (exponent - 1) >= MIN_SCALE:
        candidate = _with_values(case, _mapped(case.logical, lambda a: a * 0.5), case.layouts)
        if not probe.fails(candidate):
            break
        case, exponent = candidate, exponent - 1
    return case, exponent


def _round(probe: _Probe, case: CaseInputs) -> tuple[CaseInputs, bool]:
    candidate = _with_values(case, _mapped(case.logical, _round_mantissa), case.layouts)
    if probe.fails(candidate):
        return candidate, True
    return case, False


def _round_mantissa(values: np.ndarray) -> np.ndarray:
    """Each value rounded to SIGNIFICANT_BITS significant bits (zeros, infinities and NaN kept)."""
    finite = np.isfinite(values) & (values != 0)
    exponent = np.floor(np.log2(np.abs(np.where(finite, values, 1.0))))
    step = np.exp2(exponent - (SIGNIFICANT_BITS - 1))
    return np.where(finite, np.round(values / step) * step, values)


def _mapped(
    logical: Mapping[str, np.ndarray], change: Callable[[np.ndarray], np.ndarray]
) -> dict[str, np.ndarray]:
    """`change` applied in float64 to every float input, rounded back to the input's dtype."""
    out = {}
    for name, values in logical.items():
        if dtypes.is_float_dtype(values.dtype):
            out[name] = change(values.astype(np.float64)).astype(values.dtype)
        else:
            out[name] = values
    return out


def _with_values(
    case: CaseInputs, logical: Mapping[str, np.ndarray], layouts: Mapping[str, layout_mod.LayoutChoice]
) -> CaseInputs:
    return replace(
        case, logical=dict(logical), layouts=dict(layouts), arrays=rebuild_from_snapshot(logical, layouts)
    )
