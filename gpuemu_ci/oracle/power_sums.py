"""A p-norm's terms |x|^p below the working precision's normal range (issue #32, underflowing squares).

A vector norm computes `(sum |x|^p)^(1/p)`. Where |x| is tiny its terms are subnormal or 0 in the precision the
kernel works in, though the norm itself is a normal number: PyTorch's float32 (and float64) `vector_norm` of a
row of 2.2e-38 returns 0, its squares having underflowed. That is rounding, not a bug, and it is not a relative
error of the terms: each term that underflows errs by up to half the smallest subnormal (`eta_w`; the smallest
normal under `flush_to_zero`) per product that forms it, in absolute terms, and the root turns that into a large
error of a small norm.

So for a `reduction` whose reference is a p-norm of the rows of its input (recognised from the reference: every
row's `r^p = sum |x|^p` for one p, checked in float64 to 1e-9 on scaled values, so that no other statistic
matches by chance), the bound adds, per row,

    r (1 - (1 - rho)^(1/p)),   rho = sum_i min(|x_i|^p, k eta_w) / sum_i |x_i|^p,   k = ceil(p) - 1 (none for p <= 1)

the norm's change when every term loses its underflow error (rho = 1: the whole norm may come out 0). `eta_w` is
that of the working precision: the declared accumulator, float32 for float32 and 16-bit cases, float64 for
float64 ones. For inputs whose terms are normal numbers rho is below 1e-30 and the allowance vanishes; a norm that
drops a term, or misses its root, still fails there.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import ceil, log

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.config.model import Family, OpSpec
from gpuemu_ci.oracle.terms import Allowance, ForwardCase, OfFamilies

# How closely the reference must follow a p-norm (relative, per row) for the rule to apply.
FORM_TOLERANCE = 1e-9


def working_precision(op: OpSpec, case_dtype: str) -> str:
    """The precision a reduction's terms are formed in: the declared accumulator, else float64 for float64 cases,
    else float32."""
    return op.error_model.accumulator or ("float64" if case_dtype == "float64" else "float32")


def norm_power(
    op: OpSpec, reference: np.ndarray, inputs: Mapping[str, np.ndarray]
) -> tuple[np.ndarray, float] | None:
    """(the rows, p) where the op is a reduction whose reference is the p-norm of each row of its one float input;
    None otherwise."""
    if op.error_model.family is not Family.REDUCTION or len(inputs) != 1:
        return None
    x = np.asarray(next(iter(inputs.values())), dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    if x.ndim < 1 or x.shape[-1] < 2 or r.size != int(np.prod(x.shape[:-1])) or not r.size:
        return None
    x = x.reshape(r.size, x.shape[-1])
    r = r.reshape(r.size)
    usable = np.all(np.isfinite(x), axis=-1) & np.isfinite(r) & (r > 0)
    if not np.any(usable):
        return None
    with np.errstate(all="ignore"):
        scale = np.abs(x).max(axis=-1)
        u = np.abs(x) / np.where(scale > 0, scale, 1.0)[:, None]  # in [0, 1], the max exactly 1
        ratio = r / np.where(scale > 0, scale, 1.0)  # the norm of u: >= 1
        # p from rows whose norm is a normal float64 where there are any: a subnormal one is rounded to a
        # multiple of the smallest subnormal, too coarse to solve for p (11 of them for sqrt(127)).
        resolved = usable & (r >= dtypes.info("float64").min_normal)
        solving = resolved if np.any(resolved) else usable
        p = _solve_power(u[solving], ratio[solving])
        if p is None:
            return None
        predicted = (u**p).sum(axis=-1) ** (1.0 / p)
        # A float64 reference below float64's normal range is rounded to a multiple of its smallest subnormal:
        # the form is checked to within one of those too (sqrt(15) * 2e-323 comes out 15, not 15.49, of them).
        slack = dtypes.info("float64").min_subnormal / np.where(scale > 0, scale, 1.0)
        agree = np.abs(predicted - ratio) <= FORM_TOLERANCE * ratio + slack
        zero_rows = np.all(x == 0, axis=-1) & (r == 0)
    if not np.all(np.where(usable, agree, zero_rows | ~np.all(np.isfinite(x), axis=-1) | ~np.isfinite(r))):
        return None
    return x, p


def _solve_power(u: np.ndarray, ratio: np.ndarray) -> float | None:
    """p with sum u^p = ratio^p, from the row that determines it best (the most spread values), by bisection on
    log(sum u^p) / p = log(ratio)."""
    spread = (u > 0).sum(axis=-1)
    informative = (spread >= 2) & (ratio > 1.0 + 1e-6)
    if not np.any(informative):
        return None
    row = int(np.argmax(np.where(informative, ratio, 0.0)))
    values, target = u[row][u[row] > 0], float(np.log(ratio[row]))
    low, high = 0.25, 256.0

    def excess(p: float) -> float:
        return float(np.log((values**p).sum()) / p) - target  # decreasing in p

    if excess(low) < 0 or excess(high) > 0:
        return None
    for _ in range(100):
        middle = (low + high) / 2.0
        if excess(middle) > 0:
            low = middle
        else:
            high = middle
    p = (low + high) / 2.0
    nearest = round(p * 2.0) / 2.0  # a declared ord is usually a half-integer: take it where it fits as well
    return nearest if abs(nearest - p) <= 1e-6 * p else p


def underflow_term(
    op: OpSpec, case_dtype: str, reference: np.ndarray, inputs: Mapping[str, np.ndarray]
) -> np.ndarray | float:
    """The allowance (before c) for a p-norm's underflowing terms (module docstring); 0 for other ops."""
    found = norm_power(op, reference, inputs)
    if found is None:
        return 0.0
    x, p = found
    info = dtypes.info(working_precision(op, case_dtype))
    eta = (
        info.min_normal if op.error_model.flush_to_zero else (info.min_subnormal / 2.0 or info.min_subnormal)
    )
    products = ceil(p) - 1
    if products < 1:  # p <= 1: |x|^p is not formed by products (p = 1: |x| itself, exact)
        return 0.0
    r = np.abs(np.asarray(reference, dtype=np.float64)).reshape(x.shape[0])
    with np.errstate(all="ignore"):
        # In logs: the terms of a float64 row of 1e-308 are 1e-616, below anything float64 holds.
        magnitude = np.abs(x)
        log_terms = np.where(magnitude > 0, p * np.log(np.where(magnitude > 0, magnitude, 1.0)), -np.inf)
        lost = np.minimum(log_terms, log(products * eta))
        rho = np.exp(_log_sum_exp(lost) - _log_sum_exp(log_terms))
        rho = np.where(np.isfinite(rho), np.minimum(rho, 1.0), 0.0)
        change = np.where(np.isfinite(r), r * -np.expm1(np.log1p(-rho) / p), 0.0)
    return np.asarray(change).reshape(np.shape(reference))


def _log_sum_exp(a: np.ndarray) -> np.ndarray:
    top = a.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    return np.asarray(np.log(np.exp(a - top).sum(axis=-1)) + top[..., 0])


def note(op: OpSpec, case_dtype: str, reference: np.ndarray, inputs: Mapping[str, np.ndarray]) -> str:
    """What the allowance includes, for a failure message; empty where the op is no p-norm."""
    found = norm_power(op, reference, inputs)
    if found is None:
        return ""
    working = working_precision(op, case_dtype)
    return (
        f"; the reference is a {found[1]:g}-norm of each row: the bound lets its |x|^p terms underflow in "
        f"{working} (half its smallest subnormal per product, r (1 - (1 - rho)^(1/p)))"
    )


class PowerSumUnderflow(OfFamilies):
    """The bound term of a p-norm's |x|^p terms underflowing in the working precision (module docstring)."""

    families = frozenset({Family.REDUCTION})
    name = "power_sum_underflow"
    models = "a p-norm's |x|^p terms underflowing in the working precision"

    def allowance(self, case: ForwardCase) -> Allowance:
        """underflow_term()."""
        b = case.bound
        return underflow_term(case.op, b.case_dtype, b.reference, b.inputs)

    def words(self, case: ForwardCase) -> str:
        """note()."""
        b = case.bound
        return note(case.op, b.case_dtype, b.reference, b.inputs)


TERM = PowerSumUnderflow()
