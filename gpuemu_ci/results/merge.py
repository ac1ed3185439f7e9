"""The documents of a suite's shards (`gpuemu-ci run --shard K/N`) -> the document the unsharded run makes.
The shards of `gpuemu-ci mutate --shard K/N` merge too (merge_mutation_shards), mutant by mutant.

Every figure of a results document is order-independent by construction (pipeline/op_runner.py: sums, maxima
whose ties go to the lowest case index, failures sorted by case index, dtype rows in config order), so the
shards' rows combine into exactly the unsharded rows: same case seeds, verdicts, failures and summary. What
only one run can know (the machine, timestamps, the lint of the kernels, which runs in shard 1) comes from the
shards as documented below. Shards of different plans, a missing shard or a shard given twice are refused
(UsageError, exit 2) with the file and the difference named.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import msgspec

from gpuemu_ci.errors import UsageError
from gpuemu_ci.results import timings
from gpuemu_ci.results.coverage import merge as merge_coverage
from gpuemu_ci.results.model import (
    OTHER_SHARDS,
    DtypeResult,
    Failure,
    OpResult,
    OpStatus,
    Results,
    ShardInfo,
    ShardOp,
    Summary,
)
from gpuemu_ci.results.mutation import MIN_SCORE_NOTE, MutantResult, MutationReport, OpMutation
from gpuemu_ci.results.rules import (
    MAX_RECORDED_FAILURES,
    merge_gradients,
    op_message,
    op_status,
    rows_reasons,
    triton_notes,
)


@dataclass(frozen=True)
class Shard:
    """One shard document and where it came from (for messages)."""

    source: str
    results: Results

    @property
    def info(self) -> ShardInfo:
        """The shard's K/N and plan (check_shards keeps only documents of shards)."""
        assert self.results.shard is not None
        return self.results.shard


def check_shards(shards: Sequence[Shard]) -> list[Shard]:
    """The shards in index order, after checking they are the N parts of one suite's plan."""
    if not shards:
        raise UsageError("merge needs the results.json of every shard")
    for shard in shards:
        if shard.results.mutation is not None:
            raise UsageError(
                f"{shard.source} is a `gpuemu-ci mutate` document and {shards[0].source} is not: merge joins "
                "the shards of one command"
            )
        if shard.results.shard is None:
            raise UsageError(
                f"{shard.source} is not the document of a shard (it was not run with --shard K/N)"
            )
    first = shards[0]
    same: tuple[tuple[str, Callable[[Results], object]], ...] = (
        ("shard count", lambda r: r.shard.count if r.shard else None),
        ("config", lambda r: r.config.sha256),
        ("master seed", lambda r: r.seed),
        ("input generator version", lambda r: r.generator_version),
        ("suite", lambda r: r.suite),
        ("gpuemu-ci version", lambda r: r.tool.version),
        ("plan (ops, dtypes, case seeds)", lambda r: r.shard.plan if r.shard else None),
        ("--allow-skips setting", lambda r: r.skips_allowed),
    )
    for shard in shards[1:]:
        for what, key in same:
            if key(shard.results) != key(first.results):
                raise UsageError(
                    f"{shard.source} and {first.source} are shards of different runs: their {what} differs "
                    f"({key(shard.results)!r} vs {key(first.results)!r})"
                )
    count = first.info.count
    by_index: dict[int, Shard] = {}
    for shard in shards:
        seen = by_index.get(shard.info.index)
        if seen is not None:
            raise UsageError(
                f"shard {shard.info.index}/{count} is given twice: {seen.source} and {shard.source}"
            )
        by_index[shard.info.index] = shard
    missing = [k for k in range(1, count + 1) if k not in by_index]
    if missing:
        listed = ", ".join(f"{k}/{count}" for k in missing)
        raise UsageError(f"shard{'s' if len(missing) > 1 else ''} {listed} missing: merge needs all {count}")
    ordered = [by_index[k] for k in range(1, count + 1)]
    names = [op.name for op in ordered[0].results.ops]
    for shard in ordered[1:]:
        if [op.name for op in shard.results.ops] != names:
            raise UsageError(f"{shard.source} lists other ops than {ordered[0].source}")
    return ordered


def merge_shards(shards: Sequence[Shard]) -> Results:
    """The unsharded document (verdict, exit code and diff not decided yet: see pipeline.gate.with_diff)."""
    ordered = check_shards(shards)
    first = ordered[0].results
    planned = {op.name: op for op in ordered[0].info.ops}
    ops = tuple(
        _merge_op([s.results.ops[i] for s in ordered], planned.get(first.ops[i].name))
        for i in range(len(first.ops))
    )
    notes = tuple(dict.fromkeys(note for s in ordered for note in s.results.notes))
    return msgspec.structs.replace(_joined(ordered, notes), ops=ops, shard=None)


def _joined(ordered: Sequence[Shard], notes: tuple[str, ...]) -> Results:
    """The first shard's document with what only the shards together know: when they ran, whether any was cut
    short, the longest one's duration, their notes; no diff yet."""
    return msgspec.structs.replace(
        ordered[0].results,
        started_at=min(s.results.started_at for s in ordered),
        finished_at=max(s.results.finished_at for s in ordered),
        cut_short=any(s.results.cut_short for s in ordered),
        summary=Summary(duration_s=max(s.results.summary.duration_s for s in ordered)),
        notes=notes,
        diff=None,
    )


def _merge_op(rows: list[OpResult], planned: ShardOp | None) -> OpResult:
    unloadable = [r for r in rows if r.import_error]
    if unloadable:
        return unloadable[0]
    ran = [r for r in rows if r.skip_reason != OTHER_SHARDS]
    if not ran:
        return rows[0]
    if any(
        r.skip_reason and r.cases_total == 0 for r in ran
    ):  # not run anywhere, for the same reason (no GPU)
        return ran[0]
    if len(ran) == 1:
        return _with_message(ran[0], planned)
    base = ran[0]
    order = list(planned.dtypes) if planned else []
    by_dtype: dict[str, list[DtypeResult]] = {}
    for row in ran:
        for d in row.dtypes:
            by_dtype.setdefault(d.dtype, []).append(d)
    dtypes = [d for d in order if d in by_dtype] + sorted(set(by_dtype) - set(order))
    merged_rows = tuple(_merge_dtype(by_dtype[d]) for d in dtypes)
    failures = sorted((f for r in ran for f in r.failures), key=_case_order)
    failing = sum(r.cases_failed + r.cases_errored for r in ran)
    total = sum(r.cases_total for r in ran)
    failed = sum(r.cases_failed for r in ran)
    errored = sum(r.cases_errored for r in ran)
    skipped = sum(r.cases_skipped for r in ran)
    status = op_status(total, failed, errored, skipped)
    comparators = sorted({d.comparator for d in merged_rows if d.comparator})
    merged = msgspec.structs.replace(
        base,
        status=status,
        skip_reason=rows_reasons(merged_rows) if status is OpStatus.SKIPPED else None,
        cases_skipped=skipped,
        comparator=",".join(comparators) or None,
        interpreter=next((r.interpreter for r in ran if r.interpreter), None),
        triton_launches=_summed(r.triton_launches for r in ran),
        triton_dot_precisions=tuple(sorted({p for r in ran for p in r.triton_dot_precisions})),
        triton_notes=triton_notes(note for r in ran for note in r.triton_notes),
        cases_total=total,
        cases_passed=total - failed - errored - skipped,
        cases_failed=failed,
        cases_errored=errored,
        dtypes=merged_rows,
        failures=tuple(failures[:MAX_RECORDED_FAILURES]),
        failures_omitted=max(0, failing - MAX_RECORDED_FAILURES),
        timings=timings.summed(r.timings for r in ran),
    )
    return _with_message(merged, planned)


def _summed(counts: Iterable[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for each in counts:
        for key, count in each.items():
            total[key] = total.get(key, 0) + count
    return dict(sorted(total.items()))


def _with_message(op: OpResult, planned: ShardOp | None) -> OpResult:
    short = planned is not None and op.cases_total < planned.cases
    message = op_message(
        op.cases_total,
        op.cases_errored,
        op.cases_failed,
        short,
        op.cases_skipped,
        rows_reasons(op.dtypes),
        op.failures,
    )
    return msgspec.structs.replace(op, message=message)


def _case_order(failure: Failure) -> int:
    return failure.case_index if failure.case_index is not None else -1


def _worst_key(row: DtypeResult) -> tuple[float, int]:
    """Largest headroom first; on a tie the lowest case index, as one run in case order keeps the first."""
    index = row.worst_case.rsplit("/", 1)[-1] if row.worst_case else ""
    position = int(index) if index.lstrip("-").isdigit() else 1 << 62
    return (-(row.worst_headroom if row.worst_headroom is not None else float("-inf")), position)


def _merge_dtype(rows: list[DtypeResult]) -> DtypeResult:
    total = sum(r.cases_total for r in rows)
    failed = sum(r.cases_failed for r in rows)
    errored = sum(r.cases_errored for r in rows)
    skipped = sum(r.cases_skipped for r in rows)
    judged = [r for r in rows if r.worst_headroom is not None]
    worst = min(judged, key=_worst_key) if judged else None
    errors = [r.max_abs_error for r in rows if r.max_abs_error is not None]
    return DtypeResult(
        dtype=rows[0].dtype,
        status=op_status(total, failed, errored, skipped),
        cases_total=total,
        cases_failed=failed,
        cases_errored=errored,
        worst_headroom=worst.worst_headroom if worst else None,
        max_abs_error=max(errors) if errors else None,
        comparator=next((r.comparator for r in rows if r.comparator), None),
        worst_case=worst.worst_case if worst else None,
        coverage=merge_coverage([r.coverage for r in rows if r.coverage is not None])
        if any(r.coverage is not None for r in rows)
        else None,
        cases_skipped=skipped,
        skip_reason=rows_reasons(rows),
        cases_from_corpus=sum(r.cases_from_corpus for r in rows),
        duration_s=sum(round((r.duration_s or 0.0) * 1e6) for r in rows) / 1e6,
        gradients=merge_gradients([r.gradients for r in rows]),
    )


def check_mutation_shards(shards: Sequence[Shard]) -> list[Shard]:
    """The shards of one `gpuemu-ci mutate --shard K/N` run, in index order (UsageError otherwise)."""
    if not shards:
        raise UsageError("merge needs the results.json of every shard")
    reports: list[MutationReport] = []
    for shard in shards:
        report = shard.results.mutation
        if report is None:
            raise UsageError(
                f"{shard.source} is a `gpuemu-ci run` document and {shards[0].source} is a `gpuemu-ci mutate` "
                "one: merge joins the shards of one command"
            )
        if report.shard is None:
            raise UsageError(
                f"{shard.source} is not the document of a shard (it was not run with --shard K/N)"
            )
        reports.append(report)
    first = reports[0].shard
    assert first is not None
    by_index: dict[int, Shard] = {}
    for shard, report in zip(shards, reports, strict=True):
        assert report.shard is not None
        if (report.shard.count, report.shard.plan) != (first.count, first.plan):
            raise UsageError(
                f"{shard.source} and {shards[0].source} are shards of different mutate runs: their plans (config, "
                "seed, operators or mutants) differ"
            )
        seen = by_index.get(report.shard.index)
        if seen is not None:
            raise UsageError(
                f"shard {report.shard.index}/{first.count} is given twice: {seen.source} and {shard.source}"
            )
        by_index[report.shard.index] = shard
    missing = [k for k in range(1, first.count + 1) if k not in by_index]
    if missing:
        listed = ", ".join(f"{k}/{first.count}" for k in missing)
        raise UsageError(
            f"shard{'s' if len(missing) > 1 else ''} {listed} missing: merge needs all {first.count}"
        )
    return [by_index[k] for k in range(1, first.count + 1)]


def merge_mutation_shards(shards: Sequence[Shard]) -> Results:
    """The document of the unsharded mutate run: every mutant's verdict from the shard that ran it (shard K
    runs the Kth of every N in each op's plan), the original suite from the first shard (every shard runs
    it whole, with the same cases). Verdict and exit code not decided yet (pipeline.gate.with_diff, then the
    mutation's --min-score: mutate.run.with_mutation)."""
    ordered = check_mutation_shards(shards)
    first = ordered[0].results
    reports = [s.results.mutation for s in ordered]
    assert first.mutation is not None and all(r is not None for r in reports)
    ops = tuple(
        _merge_mutation_op([r.ops[i] for r in reports if r is not None])
        for i in range(len(first.mutation.ops))
    )
    mutation = msgspec.structs.replace(
        first.mutation,
        ops=ops,
        cut_short=any(r.cut_short for r in reports if r is not None),
        duration_s=max(r.duration_s for r in reports if r is not None),
        shard=None,
    )
    notes = tuple(
        dict.fromkeys(n for s in ordered for n in s.results.notes if not n.startswith(MIN_SCORE_NOTE))
    )
    return msgspec.structs.replace(_joined(ordered, notes), mutation=mutation)


def _merge_mutation_op(rows: list[OpMutation]) -> OpMutation:
    count = len(rows)
    if any(len(row.mutants) != len(rows[0].mutants) or row.op != rows[0].op for row in rows):
        raise UsageError(f"the shards planned other mutants for {rows[0].op}")
    mutants: list[MutantResult] = [
        rows[(mutant.number - 1) % count].mutants[position] for position, mutant in enumerate(rows[0].mutants)
    ]
    first = rows[0]
    # The counts and the score follow from the mutants (OpMutation.__post_init__).
    return OpMutation(
        op=first.op,
        language=first.language,
        scored=first.scored,
        message=first.message,
        lint_only_because=first.lint_only_because,
        kernels=first.kernels,
        mutants_planned=first.mutants_planned,
        mutants=tuple(mutants),
    )
