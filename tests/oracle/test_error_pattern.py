"""The one-line pattern of a failing case's errors (oracle/error_pattern.py), on error maps shaped like the bugs
it names."""

from __future__ import annotations

import numpy as np

from gpuemu_ci.oracle.error_pattern import describe


def test_a_bug_in_the_last_partial_tile_is_named_with_its_dim_cols_and_tile() -> None:
    ratio = np.full((4, 1090), 0.2)
    ratio[:, 1088:] = 30.0  # a tail mask bug: only the last 2 columns, past the last full tile of 64
    line = describe(ratio, {"M": 4, "N": 1090}, {-1: 64})
    assert line.startswith("wrong only in the last partial tile of N=1090 (cols 1088–1089, tile 64)")
    assert line.endswith("8 of 4360 elements over the allowance")


def test_without_a_known_tile_a_run_of_columns_is_named_by_its_range() -> None:
    ratio = np.zeros((4, 1090))
    ratio[:, 1088:] = 3.0
    assert describe(ratio, {"N": 1090}).startswith("wrong only in cols 1088–1089 of N=1090")


def test_every_element_over_is_everywhere_and_a_spread_is_scattered() -> None:
    assert describe(np.full((3, 5), 2.0)) == "everywhere: all 15 elements over the allowance"
    spread = np.where(np.random.default_rng(1).random((64, 64)) < 0.3, 2.0, 0.5)
    assert describe(spread).startswith("scattered: ")


def test_one_head_and_every_other_row_are_told_apart() -> None:
    heads = np.zeros((3, 8, 16))
    heads[1] = 5.0
    assert describe(heads, {"H": 3}).startswith("wrong only in index 1 of axis 0 (H=3)")
    rows = np.zeros((12, 16))
    rows[1::2] = 5.0
    assert describe(rows).startswith("wrong only in every 2nd of the 12 rows, from 1")


def test_a_wrong_non_finite_class_counts_as_over() -> None:
    ratio = np.zeros((2, 8))
    ratio[0, 3] = np.inf
    assert describe(ratio).startswith("wrong only in col 3 of 8 and row 0 of 2: 1 of 16")


def test_nothing_over_says_so() -> None:
    assert describe(np.full((2, 2), 0.5)) == "no element is over its allowance"
