"""Baselines and regression diffs: compare a run with the target branch's results and classify what got worse.

- `baseline`: `baseline_of(results)` trims a run into a baseline; `diff_against(source, current, ...)` gives the
  `BaselineDiff` (neutral, saying why, when there is no usable baseline).
- `classify`: the comparison of two documents; `ops` and `kernels` classify op x dtype and kernel x arch rows;
  `limits` holds the per-kernel deltas from `[policies]`.
- `render`: the human table of a diff.
"""
