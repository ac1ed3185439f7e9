"""Gradients whose sums the op declares it accumulates in a low-precision dtype (`grad_accumulators`).

A gradient accumulated in 16 bits is the low-precision accumulator bug class: its error grows with the number of
terms, and past a point the running sum stops moving. PyTorch's CPU layer norm has it: the weight's and bias's
gradients are summed over the rows in running sums stored in the input's dtype (one per thread, added in float32
at the end; measured bit for bit), so 8,192 rows of ones give a bfloat16 bias gradient of 512, a float16 one of
4,096. The gate reports such a gradient unless the op declares it:

    grad_accumulators = { weight = "input", bias = "input" }

Then the gradient of a declared input is allowed g(n) u_decl S on top of its rule's allowance: u_decl the declared
dtype's unit roundoff (`"input"`: the gradient's own dtype), n the terms each element sums (the output's dims
the input lacks: the rows, for a norm's per-column parameters), S the scale of its partial sums, at most the sum
of its terms' magnitudes (the reference's gradient on |inputs| and |upstream|, at least |g_ref|), and g(n) =
sqrt(n) (n where the addends are correlated), as for every other accumulation (oracle/bounds.py). Each running
sum is rounded n times at most at the scale S: torch's own layer-norm gradients err by 0.4 sqrt(n) u S at most
(64 rows of same-signed upstream gradients).
"""

from __future__ import annotations

from collections.abc import Mapping
from math import prod, sqrt

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.config.model import INPUT_DTYPE, OpSpec
from gpuemu_ci.oracle.terms import GradientTermCase, SpeaksOnly


def declared_dtype(op: OpSpec, name: str, grad_dtype: str) -> str | None:
    """The dtype the op declares the gradient of `name` is accumulated in; None where it declares none."""
    declared = op.backward.accumulator_of(name) if op.backward is not None else None
    if declared is None:
        return None
    return grad_dtype if declared == INPUT_DTYPE else declared


def terms_summed(op: OpSpec, dims: Mapping[str, int], name: str) -> int:
    """n: the output's dims that the input `name` lacks (the rows, for a per-column parameter), at least 1."""
    spec = next((s for s in op.shapes.inputs if s.name == name), None)
    if spec is None:
        return 1
    output = op.shapes.output_dims
    if output is None:
        output = op.shapes.inputs[0].dims if op.shapes.inputs else ()
    own = {d for d in spec.dims if isinstance(d, str)}
    missing = [d for d in output if isinstance(d, str) and d not in own]
    return max(1, int(prod(int(dims.get(d, 1)) for d in missing)))


def term(
    op: OpSpec,
    dims: Mapping[str, int],
    name: str,
    r: np.ndarray,
    abs_grad: np.ndarray | None,
    grad_dtype: str,
    correlated: bool,
) -> np.ndarray | None:
    """c g(n) u_decl S (module docstring); None where the op declares no accumulator for this gradient."""
    declared = declared_dtype(op, name, grad_dtype)
    if declared is None or not dtypes.info(declared).is_float:
        return None
    scale = np.abs(np.where(np.isfinite(r), r, 0.0))
    if abs_grad is not None and abs_grad.shape == r.shape:
        scale = np.maximum(scale, np.abs(np.where(np.isfinite(abs_grad), abs_grad, 0.0)))
    n = terms_summed(op, dims, name)
    g = float(n) if correlated else sqrt(n)
    return np.asarray(op.error_model.bound_c * g * dtypes.info(declared).unit_roundoff * scale)


def note(op: OpSpec, dims: Mapping[str, int], name: str, grad_dtype: str, correlated: bool) -> str:
    """What the allowance includes, for a failure message; empty without a declaration."""
    declared = declared_dtype(op, name, grad_dtype)
    if declared is None:
        return ""
    n = terms_summed(op, dims, name)
    return (
        f"; it includes the declared {declared} accumulator of this gradient (grad_accumulators): "
        f"{'n' if correlated else 'sqrt(n)'} u S, n = {n} terms, S the sum of their magnitudes"
    )


class DeclaredGradientAccumulators(SpeaksOnly):
    """The words of a gradient accumulated in a declared low-precision dtype; its allowance (term()) is added by
    either rule after its own bound (gradients.judge_gradients), outside the structure bound's c."""

    name = "declared_grad_accumulators"
    models = "`grad_accumulators`: a gradient's sums kept in a declared low-precision dtype"

    def words(self, case: GradientTermCase) -> str:
        """note()."""
        return note(case.op, case.dims, case.name, case.grad_dtype, case.correlated)


TERM = DeclaredGradientAccumulators()
