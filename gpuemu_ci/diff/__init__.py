"""Baselines and regression diffs: compare a run with the target branch's results and gate on what got worse.

- `baseline.create_baseline(results) -> dict`: trim a results.json into a baseline.json.
- `apply.apply_baseline(document, path, policies, fail_on_regression=None) -> dict`: fill results.json's
  `diff` section and update its verdict/exit code when a regression fails the gate.
- `model`: the classification types; `schema.DIFF_SCHEMA`: the JSON Schema of the `diff` section.
"""
