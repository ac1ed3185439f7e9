"""What the judge adds to a failed case (backends/explain.py): the pattern, the map, and where, for the forward's
output and for a failing gradient, from a store log the layer's own code builds (triton_cpu/where.py)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np

from gpuemu_ci.backends.explain import MAX_OVER, explained, over_from_mask, over_mask, over_order
from gpuemu_ci.calls import CaseReport
from gpuemu_ci.oracle.model import Comparator, ErrorStats
from gpuemu_ci.triton_cpu.report import Explained, TritonReport
from gpuemu_ci.triton_cpu.shadow import ShadowFinding
from gpuemu_ci.triton_cpu.where import StoreLog, follow_order


def _stats(ratio: np.ndarray) -> ErrorStats:
    worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(ratio)), ratio.shape))
    return ErrorStats(Comparator.BOUND, float(ratio.max()), 1.0, worst, int((ratio > 1).sum()), ratio.size, 1.0,
                      ratio=ratio)  # fmt: skip


def _stored(outputs: list[np.ndarray], *blocks: int) -> TritonReport:
    """The report of a call whose programs stored each output in blocks of its `blocks` elements, the last one
    masked (a partial tile), as the store hook logs them."""
    log = StoreLog()
    for out, block in zip(outputs, blocks, strict=True):
        start = int(out.__array_interface__["data"][0])
        programs = -(-out.size // block)
        for pid in range(programs):
            lanes = pid * block + np.arange(block)
            mask = lanes < out.size
            addresses = start + lanes[mask] * out.itemsize
            log.note(
                "k", (programs, 1, 1), "k.py:7 (in k)", addresses, None if mask.all() else mask, (block,), pid
            )
    return TritonReport(launches=1, stores=log.maps(outputs))


def test_a_wrong_tail_is_explained_with_tile_partial_mask_program_and_line(tmp_path: Path) -> None:
    out = np.zeros(100, dtype=np.float32)
    ratio = np.full(100, 0.5)
    ratio[96:] = 40.0  # the last, partial tile of 32: elements 96-99
    report = explained(
        CaseReport(outcome="failed"), _stats(ratio), {"N": 100}, tmp_path, _stored([out], 32), explain=True
    )
    assert report.pattern == (
        "wrong only in the last partial tile of N=100 (cols 96–99, tile 32): 4 of 100 elements over the "
        "allowance; only where the store's mask is partial"
    )
    assert report.where == (
        "stored by program (3, 0, 0) of `k` (grid (4, 1, 1)), lane 0 of its block, at k.py:7 (in k); its store's "
        "mask was partial in that program"
    )
    assert report.error_map is not None and (tmp_path / report.error_map).is_file()


def test_a_failing_gradient_is_explained_from_its_own_figures_and_output(tmp_path: Path) -> None:
    forward, grad = np.zeros(64, dtype=np.float32), np.zeros(64, dtype=np.float32)
    wrong = np.zeros(64)
    wrong[37] = 9.0
    report = explained(
        CaseReport(outcome="failed", output="grad of w"),
        _stats(np.zeros(64)),  # the forward passed
        {},
        tmp_path,
        _stored([forward, grad], 64, 16),  # the gradient's programs are 16 wide, the forward's 64
        gradients=(("w", _stats(wrong)),),
        forward_outputs=1,
        explain=True,
    )
    assert report.pattern is not None and report.pattern.startswith("wrong only in col 37 of 64")
    assert report.where is not None and report.where.startswith(
        "stored by program (2, 0, 0) of `k` (grid (4, 1, 1))"
    )
    assert "lane 5 of its block" in report.where


def test_a_crash_is_not_explained() -> None:
    report = CaseReport(outcome="failed", kind="crashed")
    assert explained(report, None, {}, None) is report


def test_a_failure_outside_an_explain_rerun_gets_no_where_from_the_store_log(tmp_path: Path) -> None:
    out = np.zeros(100, dtype=np.float32)
    ratio = np.full(100, 0.5)
    ratio[96:] = 40.0
    report = explained(CaseReport(outcome="failed"), _stats(ratio), {"N": 100}, tmp_path, _stored([out], 32))
    assert report.where is None  # the pool's first run judges; only the explain re-run says where
    # without the store map the tiles are unknown: the pattern names the columns
    assert report.pattern == "wrong only in cols 96–99 of N=100: 4 of 100 elements over the allowance"


def _what_if(value: float, outputs: np.ndarray) -> Explained:
    return Explained("masked_other", "k.py:9 (in k)", f"reading {value:g} fixes it", (outputs.tobytes(),))


def test_a_masked_load_is_named_only_when_exactly_one_value_fixes_the_failing_elements(
    tmp_path: Path,
) -> None:
    reference = np.array([0.25, 0.25, 0.25, 0.25], dtype=np.float32)
    got = np.array([0.2, 0.2, 0.2, 0.2], dtype=np.float32)  # the masked lanes added to the sum
    ratio = np.abs(got - reference) / 1e-6

    def rejudge(found: Explained) -> tuple[np.ndarray | None, bool]:
        outputs = np.frombuffer(found.outputs[0], dtype=np.float32)
        ratio = np.abs(outputs - reference) / 1e-6
        return ratio, bool(np.all(ratio <= 1.0))

    def where(*what_ifs: Explained) -> str:
        triton = TritonReport(launches=1, explained=what_ifs)
        report = explained(CaseReport(outcome="failed"), _stats(ratio), {}, tmp_path, triton, explain=True,
                           rejudge=rejudge)  # fmt: skip
        return (report.where or "").split("; ")[0]  # the rest: no store was logged here

    # -inf alone fixes them: named; +inf and 1 change the outputs and fix nothing
    assert (
        where(_what_if(-np.inf, reference), _what_if(np.inf, got * 0), _what_if(1.0, got))
        == "reading -inf fixes it"
    )
    # every value fixes them (a degenerate row): not the load's doing
    assert "fixes" not in where(_what_if(-np.inf, reference), _what_if(1.0, reference))
    assert "fixes" not in where(_what_if(1.0, got))  # nothing fixes them


def _parted(pid: int, line: int) -> ShadowFinding:
    return ShadowFinding("k", (pid, 0, 0), pid, f"k.py:{line} (in k)", "var = a - b", "parted", 3.1e4, 0.2, 1.25,
                         1.0, 0.06)  # fmt: skip


def test_the_shadow_names_the_line_where_the_worst_elements_program_parted_from_float64(
    tmp_path: Path,
) -> None:
    out = np.zeros(100, dtype=np.float32)
    ratio = np.full(100, 0.5)
    ratio[40] = 9.0  # stored by program 1 (blocks of 32)
    triton = msgspec.structs.replace(_stored([out], 32), shadow=(_parted(3, 9), _parted(1, 50)), shadowed=4)
    report = explained(CaseReport(outcome="failed"), _stats(ratio), {"N": 100}, None, triton, explain=True)
    assert report.where is not None
    assert report.where.endswith(
        "; first parted from float64 at k.py:50 (in k) `var = a - b`: ×3.1e+04 at program (1, 0, 0) (kernel 1.25, "
        "float64 1)"
    )
    # The worst element's program agreed with its shadow (no finding for it): nothing is said, not another's.
    ratio[40], ratio[70] = 0.5, 9.0  # program 2
    report = explained(CaseReport(outcome="failed"), _stats(ratio), {"N": 100}, None, triton, explain=True)
    assert report.where is not None and "float64" not in report.where


def test_a_non_finite_failure_is_traced_to_a_failing_programs_shadow_when_the_worst_index_agreed() -> None:
    out = np.zeros(100, dtype=np.float32)
    ratio = np.full(100, 0.5)
    ratio[40], ratio[70] = np.inf, 2.0  # element 40 (program 1) has the wrong non-finite class
    stats = ErrorStats(Comparator.BOUND, 2.0, 1.0, (70,), 2, 100, 1.0, ratio=ratio)  # figures of finite ones
    triton = msgspec.structs.replace(_stored([out], 32), shadow=(_parted(1, 50),), shadowed=4)
    report = explained(CaseReport(outcome="failed"), stats, {"N": 100}, None, triton, explain=True)
    assert report.where is not None and report.where.startswith("stored by program (2, 0, 0)")
    assert (
        "first parted from float64 at k.py:50 (in k) `var = a - b`: ×3.1e+04 at program (1, 0, 0)"
        in report.where
    )


def test_a_failure_names_its_worst_errors_and_the_shadow_follows_their_programs_in_the_judges_order() -> None:
    """The first run's failure carries its elements over the allowance, the largest first (CaseReport.over); the
    explain re-run's shadow follows the programs that stored the worst element and then those (where.follow_order),
    the order `_parted_at` reads findings in, each program once."""
    ratio = np.full(100, 0.5)
    ratio[[5, 70, 71, 40]] = [3.0, 9.0, np.inf, 2.0]
    ratio[90] = np.nan  # not over: the judge's programs_over does not count it either
    triton = _stored([np.zeros(100, dtype=np.float32)], 32)  # the first run of an op whose Triton kernels ran
    failed = explained(CaseReport(outcome="failed"), _stats(ratio), {"N": 100}, None, triton)
    assert failed.over == (71, 70, 5, 40) and failed.over_shape == (100,)
    stores = triton.stores
    # worst element 71 -> program 2; then 70 (2 again), 5 (0), 40 (1)
    assert follow_order(stores, (71,), failed.over, failed.over_shape) == (("k", 2), ("k", 0), ("k", 1))
    assert (
        follow_order(stores, (71,), failed.over, (10, 10)) == ()
    )  # another output's shape: none of its stores
    assert follow_order(stores, None, (), None) == ()  # nothing known: the shadow then follows every program
    many = np.linspace(2.0, 3.0, 10_000)
    ranked = over_order(many)
    assert len(ranked) == MAX_OVER and ranked[0] == 9_999 and list(ranked) == sorted(ranked, reverse=True)


def test_where_more_elements_are_over_than_the_first_run_names_a_mask_says_which_they_all_are() -> None:
    """CaseReport.over names the MAX_OVER largest errors; past that, over_mask keeps every element over (NaN not
    counted, as the judge does not), so the explain re-run can tell whether any watched store wrote one."""
    few = np.full((4, 10), 0.5)
    few[1, 2] = 3.0
    assert over_mask(few) == b""  # over_order names them all
    many = np.full((100, 200), 0.5)
    many[:, 150:] = 2.0  # 5,000 over
    many[0, 0] = np.nan
    mask = over_mask(many)
    decoded = over_from_mask(mask, (100, 200))
    assert decoded is not None and decoded.shape == (100, 200)
    assert np.array_equal(decoded, many > 1.0) and int(decoded.sum()) == 5_000 > MAX_OVER
    assert over_from_mask(b"", (100, 200)) is None  # none sent: the re-run cannot tell
    exactly = np.full(MAX_OVER + 10, 0.5)
    exactly[:MAX_OVER] = 2.0  # as many as over_order names: it cannot say whether it named them all
    assert over_mask(exactly) != b"" and len(over_order(exactly)) == MAX_OVER
    triton = _stored([np.zeros(100 * 200, dtype=np.float32).reshape(100, 200)], 32)
    failed = explained(CaseReport(outcome="failed"), _stats(many), {"M": 100, "N": 200}, None, triton)
    assert failed.over_mask == mask and len(failed.over) == MAX_OVER
