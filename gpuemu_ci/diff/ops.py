"""Op x dtype classification: pass/fail transitions and worst-headroom growth.

Headroom is max over cases of error / allowed error (<= 1 passes), so "how close to failing" an op is.
With the same seed, suite and generator the cases are bit-identical, so a headroom change is the code's."""

from __future__ import annotations

from dataclasses import dataclass

from gpuemu_ci.results.base import Severity
from gpuemu_ci.results.diff import ALL, Classification, DiffEntry, EntryKind, Reason
from gpuemu_ci.results.model import DtypeResult, Failure, FailureKind, OpResult, Results

# Headroom growth is relative to max(old, this floor): below 1% of the error bound a run is at noise
# level, and 1e-6 -> 1e-5 must not read as "+900%".
HEADROOM_FLOOR = 0.01

PASSED, FAILED, ERROR, SKIPPED = "passed", "failed", "error", "skipped"

# Failures where the op gave no answer to judge: said as what happened, never as a numeric change.
NO_ANSWER = {
    FailureKind.CRASHED: "crashed",
    FailureKind.TIMEOUT: "timed out",
    FailureKind.OOM: "ran out of memory",
    FailureKind.RAISED: "raised an exception",
}
# A headroom that grew this many times or more reads as "×N", not as a percentage of thousands.
TIMES_FROM = 10.0


@dataclass(frozen=True)
class CaseBasis:
    """Whether both runs drew the same cases: same generator version, master seed and suite."""

    generator_changed: bool
    seed_changed: bool
    suite_changed: bool
    old_generator: str | None = None
    new_generator: str | None = None

    @classmethod
    def of(cls, base: Results, current: Results) -> CaseBasis:
        """Compares the case basis of the baseline run `base` with the `current` one."""
        return cls(
            generator_changed=base.generator_version != current.generator_version,
            seed_changed=base.seed != current.seed,
            suite_changed=base.suite != current.suite,
            old_generator=base.generator_version,
            new_generator=current.generator_version,
        )

    @property
    def same_cases(self) -> bool:
        """Whether both runs drew the same cases, so per-case figures can be compared."""
        return not (self.generator_changed or self.seed_changed or self.suite_changed)


def diff_ops(base: Results, current: Results, growth_threshold: float) -> list[DiffEntry]:
    """One entry per op x dtype in either run, current order first, then what only the baseline had."""
    basis = CaseBasis.of(base, current)
    entries: list[DiffEntry] = []
    for op in current.ops:
        old = base.op(op.name)
        if old is None:
            entries.extend(_whole_op(op, Classification.NEW, Severity.INFO, "new op (not in the baseline)"))
        else:
            entries.extend(_compare_op(old, op, basis, growth_threshold))
    for old in base.ops:
        if current.op(old.name) is None:
            # Dropping an op drops its coverage: shown as a warning unless the suites differ anyway.
            severity = Severity.INFO if basis.suite_changed else Severity.WARNING
            entries.extend(
                _whole_op(old, Classification.REMOVED, severity, "removed: in the baseline, not in this run")
            )
    return entries


def _whole_op(
    op: OpResult, classification: Classification, severity: Severity, message: str
) -> list[DiffEntry]:
    new = classification is Classification.NEW
    if not op.dtypes:  # skipped or could not load: no per-dtype results
        reason = Reason(
            "status",
            None if new else op.status.value,
            op.status.value if new else None,
            f"{message}; status {op.status.value}" + (f" ({op.skip_reason})" if op.skip_reason else ""),
        )
        return [_entry(op.name, classification, severity, (reason,), ALL)]
    out = []
    for d in op.dtypes:
        detail = f"status {d.status.value}"
        if d.worst_headroom is not None:
            detail += f", headroom {fmt(d.worst_headroom)}"
        reason = Reason(
            "status", None if new else d.status.value, d.status.value if new else None, f"{message}; {detail}"
        )
        out.append(_entry(op.name, classification, severity, (reason,), d.dtype))
    return out


def _compare_op(old: OpResult, op: OpResult, basis: CaseBasis, growth_threshold: float) -> list[DiffEntry]:
    entries = []
    for d in op.dtypes:
        before = old.dtype_result(d.dtype)
        if before is None:
            reason = Reason(
                "status",
                None,
                d.status.value,
                f"new dtype (the baseline did not run {d.dtype}); status {d.status.value}",
            )
            entries.append(_entry(op.name, Classification.NEW, Severity.INFO, (reason,), d.dtype))
        else:
            failures = tuple(f for f in op.failures if f.dtype == d.dtype)
            entries.append(compare_dtype(op.name, before, d, basis, growth_threshold, failures))
    for before in old.dtypes:
        if op.dtype_result(before.dtype) is not None:
            continue
        entries.append(_missing_dtype(op, before, basis))
    return entries


def _missing_dtype(op: OpResult, before: DtypeResult, basis: CaseBasis) -> DiffEntry:
    """A dtype the baseline judged and this run did not."""
    if op.status.value == ERROR and before.status.value == PASSED:
        why = op.message or "the op could not run"
        reason = Reason(
            "status", before.status.value, ERROR, f"passed in the baseline, could not be judged now: {why}"
        )
        return _entry(op.name, Classification.REGRESSED, Severity.WARNING, (reason,), before.dtype)
    if op.status.value == SKIPPED:
        why = op.skip_reason or op.message or "skipped"
        reason = Reason(
            "status",
            before.status.value,
            SKIPPED,
            f"not run this time ({why}); the baseline had it {before.status.value}",
        )
    else:
        reason = Reason(
            "status", before.status.value, None, f"removed: the baseline ran {before.dtype}, this run did not"
        )
    severity = Severity.INFO if basis.suite_changed else Severity.WARNING
    return _entry(op.name, Classification.REMOVED, severity, (reason,), before.dtype)


def compare_dtype(
    name: str,
    old: DtypeResult,
    new: DtypeResult,
    basis: CaseBasis,
    growth_threshold: float,
    failures: tuple[Failure, ...] = (),
) -> DiffEntry:
    """Classifies one op x dtype present in both runs (`failures`: this run's recorded failures of it)."""

    def entry(classification: Classification, severity: Severity, *reasons: Reason) -> DiffEntry:
        return _entry(name, classification, severity, (*reasons, *context), new.dtype)

    context: list[Reason] = []
    no_answer = _no_answer(new, failures)
    headroom = headroom_reason(old.worst_headroom, new.worst_headroom, growth_threshold)
    if headroom is not None and no_answer is None:  # a crash is not a numeric change
        context.append(headroom[0])
    if old.cases_total != new.cases_total and old.cases_total is not None and new.cases_total is not None:
        context.append(
            Reason(
                "cases_total",
                old.cases_total,
                new.cases_total,
                f"cases {old.cases_total} -> {new.cases_total}",
            )
        )
    status = Reason(
        "status",
        old.status.value,
        new.status.value,
        f"{old.status.value} -> {new.status.value}" + (no_answer or _failed_part(new)),
    )

    # The instrument changed: the cases or the rule that judges them differ, so nothing is attributed.
    instrument: list[Reason] = []
    if basis.generator_changed:
        instrument.append(
            Reason(
                "generator_version",
                basis.old_generator,
                basis.new_generator,
                f"fuzz generator version {basis.old_generator} -> {basis.new_generator}: the "
                "cases differ, so a change here is not counted as a regression",
            )
        )
    if old.comparator != new.comparator and old.comparator and new.comparator:
        instrument.append(
            Reason(
                "comparator",
                old.comparator,
                new.comparator,
                f"comparator {old.comparator} -> "
                f"{new.comparator}: headroom is measured differently, not counted",
            )
        )
    if instrument:
        reasons = [*instrument, status] if old.status.value != new.status.value else instrument
        return entry(Classification.TOOLCHAIN_CHANGED, Severity.INFO, *reasons)

    if old.status.value == PASSED and new.status.value == FAILED:
        return entry(Classification.REGRESSED, Severity.ERROR, status, *_seed_note(basis))
    if new.status.value == ERROR and old.status.value != ERROR:
        return entry(
            Classification.REGRESSED,
            Severity.WARNING,
            Reason(
                "status",
                old.status.value,
                new.status.value,
                f"{old.status.value} -> error: could not be judged now (the run's own verdict reports it)",
            ),
        )
    if old.status.value in (FAILED, ERROR, SKIPPED) and new.status.value == PASSED:
        return entry(Classification.IMPROVED, Severity.INFO, status)
    if old.status.value != PASSED and new.status.value == FAILED:
        note = (
            "still failing"
            if old.status.value == FAILED
            else f"the baseline had no verdict ({old.status.value})"
        )
        return entry(
            Classification.UNCHANGED,
            Severity.INFO,
            Reason("status", old.status.value, new.status.value, f"{note}{_failed_part(new)}"),
        )
    if headroom is not None and new.status.value == PASSED:
        growth = headroom[1]
        if growth > growth_threshold:
            if basis.same_cases:
                return entry(Classification.REGRESSED, Severity.WARNING)
            return entry(Classification.UNCHANGED, Severity.INFO, *_seed_note(basis))
        if growth < -growth_threshold:
            return entry(Classification.IMPROVED, Severity.INFO)
    return entry(Classification.UNCHANGED, Severity.INFO)


def _entry(
    name: str, classification: Classification, severity: Severity, reasons: tuple[Reason, ...], dtype: str
) -> DiffEntry:
    return DiffEntry(
        kind=EntryKind.OP,
        name=name,
        variant=dtype,
        classification=classification,
        severity=severity,
        reasons=reasons,
    )


def headroom_reason(
    old: float | None, new: float | None, growth_threshold: float
) -> tuple[Reason, float] | None:
    """(reason, relative growth) or None when either side has no headroom."""
    if old is None or new is None:
        return None
    growth = (new - old) / max(old, HEADROOM_FLOOR)
    message = f"worst headroom {fmt(old)} -> {fmt(new)} ({change(old, new, growth)}"
    if growth > growth_threshold:
        message += f", more than headroom_growth_threshold {pct(growth_threshold, signed=False)}"
    message += ")"
    if new > 1 >= old:
        message += "; above 1 means past the error bound"
    return Reason("worst_headroom", old, new, message), growth


def _no_answer(d: DtypeResult, failures: tuple[Failure, ...]) -> str | None:
    """ ": 1 of 8 cases crashed" when every recorded failure of a failed row is one without an answer."""
    if d.status.value != FAILED or not failures or any(f.kind not in NO_ANSWER for f in failures):
        return None
    what = " or ".join(dict.fromkeys(NO_ANSWER[f.kind] for f in failures))
    if not d.cases_total:
        return f": the op {what}"
    if d.cases_failed is None or d.cases_failed == len(failures):
        return f": {len(failures)} of {d.cases_total} cases {what}"
    return f": {d.cases_failed} of {d.cases_total} cases failed; the recorded ones {what}"


def _failed_part(d: DtypeResult) -> str:
    if d.status.value == FAILED and d.cases_failed is not None and d.cases_total:
        return f": {d.cases_failed} of {d.cases_total} cases failed"
    return ""


def _seed_note(basis: CaseBasis) -> list[Reason]:
    if basis.same_cases:
        return []
    what = [w for w, changed in (("seed", basis.seed_changed), ("suite", basis.suite_changed)) if changed]
    return [
        Reason(
            "cases",
            None,
            None,
            f"the {' and '.join(what)} differ from the baseline's, so the "
            "cases differ: headroom changes are not attributed to the code",
        )
    ]


def fmt(value: float) -> str:
    """3 significant digits, no exponent for the usual headroom range."""
    if value == 0 or 1e-3 <= abs(value) < 1e5:
        return f"{value:.3g}"
    return f"{value:.2e}"


def change(old: float, new: float, growth: float) -> str:
    """A headroom change a reader can take in: "+35%", "×240" for a large growth, "new nonzero" from zero."""
    if old == 0 and new > 0:
        return "new nonzero"
    if old > 0 and new / old >= TIMES_FROM:
        return f"×{fmt(new / old)}"
    return pct(growth)


def pct(ratio: float, signed: bool = True) -> str:
    """A ratio as a whole percentage (`+12%`, signed unless told not), clamped to seven digits so a growth
    from almost nothing stays readable."""
    value = ratio * 100
    text = f"{value:+.0f}%" if signed else f"{value:.0f}%"
    return text if abs(value) < 1e6 else (">+999999%" if value > 0 else "<-999999%")
