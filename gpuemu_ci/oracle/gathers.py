"""Gradients that scatter-add: of a table read through an index input (an embedding's weight, an embedding
bag's), and of every input of the `exact` family (data movement and selection: a max-pool's input).

The forward gathers or selects elements; the backward adds the upstream gradient of every output element into
the element it read. Two things follow that the generic sum floor (oracle/gradients.py) does not see:

- the number of terms a table's row sums is how often its index occurs: up to the number of index elements
  (an embedding bag's L ids, not its NB bags); for the `exact` family, the output's dims the input lacks
  (overlapping pooling windows that select the same element);
- the scatter-add accumulates in the gradient's own dtype unless the op declares an accumulator: PyTorch's CPU
  `embedding_dense_backward`, `index_add_` and max-pool backward add 16-bit terms in 16 bits, as `atomicAdd` on
  a half does on a GPU. A 16-bit gradient then errs by the 16-bit roundings of that sum.

So the floor is `c sqrt(n) u S`, S the sum of the |terms| each element adds up (the reference's gradient on
|upstream|), u the gradient's unit roundoff for a 16-bit gradient without a declared accumulator, else the
accumulator's. It is 0 where the reference routed no term (S = 0), so a term routed to the wrong element
still fails there.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import prod

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.config.model import Family, OpSpec, ValueKind
from gpuemu_ci.oracle import bounds
from gpuemu_ci.oracle.model import Comparator
from gpuemu_ci.oracle.terms import GradientTermCase, SpeaksOnly


def index_elements(op: OpSpec, dims: Mapping[str, int], name: str) -> int:
    """How many index elements may address one element of input `name`: over the index inputs whose `high` is
    one of its dims, the product of their dims it does not share (an embedding's B x T ids; 1 for a loss's
    class targets, one per row of the logits they pick from). 0 when no index input addresses it."""
    spec = next((s for s in op.shapes.inputs if s.name == name), None)
    if spec is None:
        return 0
    own = {d for d in spec.dims if isinstance(d, str)}
    count = 0
    for index in op.shapes.inputs:
        if index.kind is ValueKind.INDEX and isinstance(index.high, str) and index.high in own:
            count += prod(
                dims.get(d, 1) if isinstance(d, str) else int(d) for d in index.dims if d not in own
            )
    return count


def scatter_roundoff(op: OpSpec, case_dtype: str, grad_dtype: str) -> float:
    """The unit roundoff the scatter-add accumulates in: the gradient's own for a 16-bit gradient without a
    declared accumulator, else the accumulator's."""
    if grad_dtype in ("float16", "bfloat16") and not op.error_model.accumulator:
        return dtypes.info(grad_dtype).unit_roundoff
    return bounds.accumulator_roundoff(op, case_dtype)


def scattered_terms(
    op: OpSpec, dims: Mapping[str, int], name: str, summed: int, counted: np.ndarray | None = None
) -> np.ndarray | int:
    """n, per element where it is counted: for the `exact` family, how many terms the reference routed to each
    element (`counted`: its backward with an upstream gradient of ones; a pure routing adds each term with
    coefficient 1), else the output's dims the input lacks (`summed`); for a table gathered by an index input,
    the index elements that may address one of its elements; 0 for other gradients."""
    exact = op.error_model.family is Family.EXACT
    if exact and counted is not None:
        return np.abs(np.where(np.isfinite(counted), counted, 0.0))
    gathered = index_elements(op, dims, name)
    if gathered > 1:
        return gathered
    return summed if exact else 0


def scatters(op: OpSpec, dims: Mapping[str, int], name: str) -> bool:
    """Whether the gradient of `name` is a scatter-add (module docstring)."""
    return op.error_model.family is Family.EXACT or index_elements(op, dims, name) > 1


def scatter_floor(
    op: OpSpec,
    case_dtype: str,
    n: np.ndarray | int,
    abs_grad: np.ndarray | None,
    grad_dtype: str,
) -> np.ndarray | float:
    """c sqrt(n) u S for a scatter-added gradient of n terms at most per element (module docstring)."""
    if abs_grad is None or (np.ndim(n) == 0 and n <= 1):  # one term per element: nothing is accumulated
        return 0.0
    scale = np.abs(np.where(np.isfinite(abs_grad), abs_grad, 0.0))
    u = scatter_roundoff(op, case_dtype, grad_dtype)
    return op.error_model.bound_c * np.sqrt(np.maximum(n, 1.0)) * u * scale


def note(op: OpSpec, case_dtype: str, dims: Mapping[str, int], name: str, grad_dtype: str) -> str:
    """What the allowance of a scatter-added gradient includes, for its failure message."""
    if not scatters(op, dims, name):
        return ""
    sixteen = grad_dtype in ("float16", "bfloat16") and not op.error_model.accumulator
    where = f"{grad_dtype} (no accumulator declared)" if sixteen else "the accumulator's precision"
    counted = (
        "the terms routed to each element" if op.error_model.family is Family.EXACT else "the index elements"
    )
    ties = (
        "; tied inputs of the selection are judged by their group's sum"
        if op.error_model.family is Family.EXACT
        else ""
    )
    return (
        f"; the allowance includes {op.error_model.bound_c:g} × √n × u × the sum of |terms|, a scatter-add "
        f"accumulated in {where}, n {counted}{ties}"
    )


class ScatteredTerms(SpeaksOnly):
    """The words of a scatter-added gradient; its allowance (scatter_floor) is the baseline-relative rule's
    floor (gradients.judge_gradients), not a term of the structure bound."""

    name = "scattered_terms"
    models = "a gather's gradient scatter-added: sqrt(n) u sum|terms|, n the terms routed to each element"

    def words(self, case: GradientTermCase) -> str:
        """note(), for gradients judged by the baseline-relative rule."""
        if case.rule is Comparator.BOUND:
            return ""
        return note(case.op, case.dtype, case.dims, case.name, case.grad_dtype)


TERM = ScatteredTerms()
