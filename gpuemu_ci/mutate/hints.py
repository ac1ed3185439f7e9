"""What the config likely lacks to kill a surviving mutant, inferred from the bug class the operator models
and from what the original run's cases covered (sizes, layouts, value modes, dtypes). A hint names the key to
change; where nothing in the coverage explains the survivor, it says what the survivor needs without blaming
a key."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpuemu_ci.calls import CaseReport


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _sizes(cases: Sequence[CaseReport]) -> dict[str, list[int]]:
    drawn: dict[str, set[int]] = {}
    for case in cases:
        for dim, value in case.dims.items():
            drawn.setdefault(dim, set()).add(value)
    return {dim: sorted(values) for dim, values in sorted(drawn.items())}


def _tail(cases: Sequence[CaseReport]) -> str | None:
    sizes = _sizes(cases)
    if sizes and all(_power_of_two(v) for values in sizes.values() for v in values):
        shown = "; ".join(f"{dim} ∈ {{{', '.join(map(str, values))}}}" for dim, values in sizes.items())
        return (
            f"no case has a size that is not a multiple of the block (every size drawn is a power of two: "
            f"{shown}): give the dims a range, e.g. `N = {{ min = 1, max = ... }}` in [ops.dims] (or [kernels.dims])"
        )
    return None


def _layouts(cases: Sequence[CaseReport]) -> str | None:
    seen = {layout for case in cases for layout in case.layouts.values()}
    if seen <= {"contiguous"}:
        return (
            "every input was contiguous: add non-contiguous layouts "
            '(`layouts = ["contiguous", "transposed", "strided", "row_padded"]`)'
        )
    return None


def _modes(cases: Sequence[CaseReport], wanted: tuple[str, ...], what: str) -> str | None:
    seen = {case.distribution for case in cases}
    if not seen & set(wanted):
        return f'no case had {what} ({" or ".join(wanted)}): add "adversarial" to the op\'s `distributions`'
    return None


def _dtypes(cases: Sequence[CaseReport], unjudged: Sequence[CaseReport]) -> str | None:
    seen = {case.dtype for case in cases if case.dtype}
    narrow = sorted({case.dtype for case in unjudged if case.dtype in ("float16", "bfloat16")})
    if seen and seen <= {"float32", "float64"} and narrow:
        why = next((case.message for case in unjudged if case.dtype in narrow and case.message), "")
        return (
            f"the {'/'.join(narrow)} cases were not judged on this machine"
            + (f" ({why.strip().splitlines()[0][:120]})" if why.strip() else "")
            + ": only where they are judged (a GPU) can a narrowed accumulator show"
        )
    if seen and seen <= {"float32", "float64"}:
        return (
            f"only {', '.join(sorted(seen))} ran: declare float16/bfloat16 in `dtypes` "
            "(and in ci.quick_dtypes for the quick suite)"
        )
    return None


def _loop(cases: Sequence[CaseReport]) -> str:
    sizes = _sizes(cases)
    largest = ", ".join(f"{dim} ≤ {values[-1]}" for dim, values in sizes.items())
    return (
        f"the loop may run once in every case ({largest or 'no dims'}): raise the dims' `max` above the "
        "loop's chunk (its block size)"
    )


Rule = Callable[[Sequence[CaseReport], Sequence[CaseReport], str, str], str | None]


def _rules() -> dict[str, Rule]:
    def tail(
        cases: Sequence[CaseReport], unjudged: Sequence[CaseReport], before: str, after: str
    ) -> str | None:
        return _tail(cases)

    def negative(
        cases: Sequence[CaseReport], unjudged: Sequence[CaseReport], before: str, after: str
    ) -> str | None:
        return _tail(cases) or _modes(
            cases, ("adversarial:all_negative", "adversarial:underflow_rows"), "rows of negative values"
        )

    def layout(
        cases: Sequence[CaseReport], unjudged: Sequence[CaseReport], before: str, after: str
    ) -> str | None:
        return _layouts(cases)

    def narrowed(
        cases: Sequence[CaseReport], unjudged: Sequence[CaseReport], before: str, after: str
    ) -> str | None:
        return _dtypes(cases, unjudged)

    def loop(
        cases: Sequence[CaseReport], unjudged: Sequence[CaseReport], before: str, after: str
    ) -> str | None:
        extra = _modes(cases, ("adversarial:ascending",), "ascending rows (the running max moves)")
        return _loop(cases) + (f"; {extra}" if extra else "")

    def term(
        cases: Sequence[CaseReport], unjudged: Sequence[CaseReport], before: str, after: str
    ) -> str | None:
        if "eps" in before.lower() and "eps" not in after.lower():
            return _modes(
                cases, ("adversarial:zero_rows",), "rows of zeros (where only eps keeps 1/sqrt finite)"
            )
        return None

    def program_id(
        cases: Sequence[CaseReport], unjudged: Sequence[CaseReport], before: str, after: str
    ) -> str | None:
        return "the grid's axes may have been equal in every case: let the dims that size them differ"

    def atomic(
        cases: Sequence[CaseReport], unjudged: Sequence[CaseReport], before: str, after: str
    ) -> str | None:
        return "no two programs added into the same place in a case: let the dim split across programs exceed one block"

    return {
        "bound_flipped": tail,
        "bound_shifted": tail,
        "block_for_size": tail,
        "other_dropped": tail,
        "other_zeroed": negative,
        "where_removed": negative,
        "offset_shifted": layout,
        "stride_swapped": layout,
        "accumulator_narrowed": narrowed,
        "accumulator_reset": loop,
        "rescale_dropped": loop,
        "term_dropped": term,
        "program_id_swapped": program_id,
        "atomic_to_store": atomic,
    }


_RULES = _rules()


def hint(
    operator: str,
    before: str,
    after: str,
    cases: Sequence[CaseReport],
    unjudged: Sequence[CaseReport] = (),
) -> str | None:
    """What the config likely lacks to kill the mutant `operator` made (line `before` changed to `after`),
    given the original run's judged cases and those it could not judge here (skipped); None when nothing can
    be inferred."""
    rule = _RULES.get(operator)
    return rule(cases, unjudged, before, after) if rule is not None else None
