"""`[validation] check_nan` / `check_inf` as gpuemu means them: on, any NaN (any infinity) in an output fails the
case, whatever the reference holds there. Off, that rule is simply not applied: the comparison with the
reference (oracle/compare.py) still fails a NaN or an infinity where the reference has none."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpuemu_ci.config.model import Validation
from gpuemu_ci.oracle.model import Finding
from gpuemu_ci.results.model import FailureKind


def nonfinite_rules(output: np.ndarray, reference: np.ndarray, validation: Validation) -> list[Finding]:
    """The findings of the rules the config switched on, for one float output (and its reference)."""
    rules: list[tuple[str, str, Callable[[np.ndarray], np.ndarray]]] = []
    if validation.check_nan:
        rules.append(("check_nan", "NaN", np.isnan))
    if validation.check_inf:
        rules.append(("check_inf", "infinite", np.isinf))
    if not rules:
        return []
    y = np.asarray(output).astype(np.float64)
    r = np.asarray(reference, dtype=np.float64)
    findings = []
    for key, what, test in rules:
        mask = test(y)
        if not mask.any():
            continue
        expected = int(test(r)[mask].sum()) if r.shape == y.shape else 0
        note = (
            f"; the reference is {what} at {expected} of them too: `{key} = false` judges non-finite values "
            "against the reference instead"
            if expected
            else ""
        )
        findings.append(
            Finding(
                FailureKind.NONFINITE,
                f"{int(mask.sum())} of {y.size} elements are {what}, and [validation] {key} = true fails any "
                f"{what} output{note}",
            )
        )
    return findings
