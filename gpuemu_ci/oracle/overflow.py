"""Why an output is non-finite where the exact answer is finite (issue #32).

Such an element always fails: a NaN or an infinity where the answer is a representable number is a wrong answer
whatever produced it, and a non-finite value cannot be excused without excusing the bugs that make them (a
softmax without its max subtracted, a masked lane reading NaN padding). What the failure adds is which of two
causes it is, from the reference's own run in the working precision at the same elements:

- non-finite there too: the op's formula, evaluated in the working precision, overflows its range there; the
  kernel computes as the formula does, and a rescaled formula or a wider accumulator would compute them;
- finite there: the non-finite values come from the op's own arithmetic (intermediates rounded to the case's
  dtype that overflow its range where the working precision does not) or from memory it should not read
  (the padding of a row-padded view). PyTorch's CPU float16 p-norm backward (p = 3) computes `x |x| / N^2` in
  float16, which overflows at |x| > 256 and N > 256 (NaN on half the elements, 0 on the rest, where the gradient
  is 0.058); its bfloat16 GEMM reads past the end of each row of a view when K is odd (oneDNN issue #5717).
"""

from __future__ import annotations

import numpy as np


def note(
    output: np.ndarray, reference: np.ndarray, working_run: np.ndarray | None, working: str, case_dtype: str
) -> str:
    """What to add to a non-finite finding; empty where there is nothing to say (no such element, or no working-
    precision run of the same shape)."""
    y = np.asarray(output).astype(np.float64)
    r = np.asarray(reference, dtype=np.float64)
    if working_run is None or y.shape != r.shape:
        return ""
    w = np.asarray(working_run).astype(np.float64)
    if w.shape != r.shape:
        return ""
    wrong = ~np.isfinite(y) & np.isfinite(r)
    count = int(wrong.sum())
    if not count:
        return ""
    inherent = int((wrong & ~np.isfinite(w)).sum())
    if inherent == count:
        return (
            f"; the reference evaluated in {working} is non-finite at all {count} of them too: the op's formula "
            f"overflows {working}'s range there (a rescaled formula or a wider accumulator computes them)"
        )
    where = f"at all {count} of them" if not inherent else f"at {count - inherent} of the {count}"
    return (
        f"; the reference evaluated in {working} is finite {where}: the non-finite values come from the op's own "
        f"arithmetic (intermediates that overflow {case_dtype}'s range where {working} does not) or from memory it "
        "should not read (the padding of a row-padded view)"
    )
