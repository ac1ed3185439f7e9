"""A log-softmax row statistic stored in a 16-bit case dtype before it is subtracted (issue #32).

PyTorch's CPU `torch.log_softmax` over the last dim on float16/bfloat16 (`serial_vec_log_softmax_lastdim_range`)
keeps each row's max and sum in buffers of the inputs' dtype: it sums s = sum exp(x - max) in float32, stores s
in 16 bits, takes its log in float32, stores log s in 16 bits again, and writes x - max - log s rounded once
(measured: that sequence reproduces its output bit for bit on 1.7 million elements, rows of 1 to 4,096 values of
scale 0.01 to 300). s >= 1 (the max's own term is 1), so storing it errs by u relative, an absolute u on log s
wherever log s is; storing log s errs by u log s. A row whose output is near 0 (x = 0.005 and -3.9: log s =
0.02, lse = 0.025) errs by 0.0034 in bfloat16 where rounding x - max and lse at |x| + |lse| allows 2.4e-4.

So on log-domain rows the allowance adds u (1 + log s), log s = -max of the row's reference (the max element's
log-probability is -log s); with the output's rounding u |r| it bounds torch's error within 0.999 on those rows.
"""

from __future__ import annotations

import numpy as np

from gpuemu_ci import dtypes

# s stored in the case dtype: relative u, an absolute u on its log.
SUM_ROUNDINGS = 1.0


def term(case_dtype: str, reference: np.ndarray, log_rows: np.ndarray, axis: int) -> np.ndarray:
    """u (SUM_ROUNDINGS + log s) on the rows marked in `log_rows` (broadcast along `axis`), 0 elsewhere; the
    caller decides that the op rounds in the case dtype and that the rows are log-probabilities."""
    r = np.asarray(reference, dtype=np.float64)
    finite = np.where(np.isfinite(r), r, -np.inf)
    with np.errstate(invalid="ignore"):
        log_s = -finite.max(axis=axis, keepdims=True)
    log_s = np.where(np.isfinite(log_s), np.maximum(log_s, 0.0), 0.0)
    u = dtypes.info(case_dtype).unit_roundoff
    return np.where(log_rows, u * (SUM_ROUNDINGS + log_s), 0.0)


WORDS = "and the row's sum of exponentials and its log, each stored in {dtype}: u (1 + log s)"
