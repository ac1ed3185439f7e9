"""How an op's status and note follow from its case counts: one rule for a run (pipeline/op_runner.py) and for
the merge of a run's shards (results/merge.py), so both write the same document."""

from __future__ import annotations

from collections.abc import Iterable

from gpuemu_ci.results.model import DtypeResult, Failure, GradientResult, OpStatus

MAX_RECORDED_FAILURES = 20  # per op; the rest are counted (snapshots cost disk and comment space)
MAX_TRITON_NOTES = 12  # per op: each names a kernel line, so a handful covers what there is to say


def triton_notes(notes: Iterable[str]) -> tuple[str, ...]:
    """An op's Triton notes as results record them: distinct, sorted, the first MAX_TRITON_NOTES (the same
    whatever order the cases, or the shards, came in)."""
    return tuple(sorted(set(notes)))[:MAX_TRITON_NOTES]


def op_status(total: int, failed: int, errored: int, skipped: int = 0) -> OpStatus:
    """Skipped cases (not judged on this machine) count neither way: an op none of whose cases was judged is
    skipped, never passed."""
    if failed:
        return OpStatus.FAILED
    if errored:
        return OpStatus.ERROR
    if total - skipped == 0:
        return OpStatus.SKIPPED if skipped else OpStatus.ERROR
    return OpStatus.PASSED


def op_message(
    total: int,
    errored: int,
    failed: int,
    cut_short: bool,
    skipped: int = 0,
    skip_reason: str | None = None,
    failures: Iterable[Failure] = (),
) -> str | None:
    """The note an OpResult carries about its counts; `failures` (its recorded ones) say who failed in the cases
    that could not be judged."""
    if total == 0:
        return "no case ran" + (" (the suite timeout expired first)" if cut_short else "")
    if errored and not failed:
        who = errored_parties(failures)
        return f"{errored} of {total} cases could not be judged" + (
            f" ({who} failed)" if who else " (see their failures for why)"
        )
    if skipped:
        return f"{skipped} of {total} cases not judged here ({skip_reason}): not tested"
    return None


def errored_parties(failures: Iterable[Failure]) -> str:
    """Who failed in the recorded cases that could not be judged, in words: "the inputs hook", "the reference
    and the case's setup"; "" when no record says."""
    parties = sorted({f.party for f in failures if f.errored and f.party})
    return " and ".join("the case's setup" if p == "setup" else f"the {p}" for p in parties)


def merge_gradient(seen: GradientResult | None, new: GradientResult) -> GradientResult:
    """Two figures of one gradient (cases, or shards) as one: the worst headroom and error, whatever the order.
    An op's gradients are judged by one rule; should two differ, both are named, sorted."""
    if seen is None:
        return new
    rules = sorted(set(seen.rule.split("+")) | set(new.rule.split("+")))
    headrooms = [h for h in (seen.worst_headroom, new.worst_headroom) if h is not None]
    errors = [e for e in (seen.max_abs_error, new.max_abs_error) if e is not None]
    return GradientResult(
        seen.of, "+".join(rules), max(headrooms) if headrooms else None, max(errors) if errors else None
    )


def merge_gradients(rows: list[tuple[GradientResult, ...]]) -> tuple[GradientResult, ...]:
    """The per-gradient figures of several dtype rows of one op x dtype (shards), sorted by input name."""
    merged: dict[str, GradientResult] = {}
    for row in rows:
        for one in row:
            merged[one.of] = merge_gradient(merged.get(one.of), one)
    return tuple(merged[name] for name in sorted(merged))


def joined_reasons(reasons: Iterable[str]) -> str | None:
    """Skip reasons as a row records them: distinct, sorted, joined by "; "."""
    return "; ".join(sorted(set(reasons))) or None


def rows_reasons(rows: Iterable[DtypeResult]) -> str | None:
    """An op's skip reasons: those of its dtype rows together."""
    return joined_reasons(part for row in rows if row.skip_reason for part in row.skip_reason.split("; "))
