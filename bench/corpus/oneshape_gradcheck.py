"""The one-shape backward baseline: what a `torch.autograd.gradcheck`-style test of a training kernel checks.

gradcheck itself compares a float64 function's analytical Jacobian with finite differences; a kernel that
computes in float32 or 16-bit cannot pass finite differences in its own precision, so kernel test suites (Liger,
Unsloth, the Triton tutorials) do the same comparison against the reference's autograd instead: at one shape,
the op's forward and backward on inputs requiring a gradient, a random upstream gradient, and
`torch.allclose(grad, grad_ref, atol=tol, rtol=tol)` for each input's gradient (and the output), with the
reference differentiated in float64 on the same rounded inputs and its gradients cast to the input's dtype.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

if not torch.cuda.is_available():  # Triton kernels run in its interpreter without a GPU, as gpuemu-ci's do
    os.environ.setdefault("TRITON_INTERPRET", "1")

from oneshape_baseline import TOLERANCE, load_callable

from gpuemu_ci import dtypes
from gpuemu_ci.config.model import OpSpec


def _tensor(a: np.ndarray) -> torch.Tensor:
    if a.dtype == dtypes.info("bfloat16").numpy:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def _close(got: torch.Tensor, expected: torch.Tensor, tol: float, what: str) -> str | None:
    if tuple(got.shape) != tuple(expected.shape):
        return f"{what}: shape {tuple(got.shape)} != {tuple(expected.shape)}"
    g = got.detach().double()
    e = expected.detach().to(got.dtype).double()
    if not torch.allclose(g, e, atol=tol, rtol=tol):
        worst = float((g - e).abs().nan_to_num(nan=math.inf).max()) if g.numel() else 0.0
        return f"{what}: allclose({tol:g}) failed, max |error| {worst:.3g}"
    return None


def run_backward_trial(
    op: OpSpec,
    dtype: str,
    inputs: Mapping[str, np.ndarray],
    kwargs: Mapping[str, Any],
    rng: np.random.Generator,
) -> str | None:
    assert op.backward is not None
    names = [n for n in op.backward.grad_inputs if dtypes.is_float_dtype(inputs[n].dtype)]
    tol = TOLERANCE.get(dtype, 1e-4)
    ours = {n: _tensor(a) for n, a in inputs.items()}
    exact = {
        n: torch.from_numpy(a.astype(np.float64) if dtypes.is_float_dtype(a.dtype) else a.copy())
        for n, a in inputs.items()
    }
    for n in names:
        ours[n].requires_grad_(True)
        exact[n].requires_grad_(True)
    reference = load_callable(op.targets.reference)(**exact, **kwargs)
    upstream = torch.from_numpy(rng.standard_normal(tuple(reference.shape)))
    ref_grads = torch.autograd.grad(
        reference, [exact[n] for n in names], upstream, allow_unused=True, materialize_grads=True
    )
    try:
        out = load_callable(op.targets.op)(**ours, **kwargs)
        grads = torch.autograd.grad(
            out, [ours[n] for n in names], upstream.to(out.dtype), allow_unused=True, materialize_grads=True
        )
    except Exception as exc:  # a kernel that raises fails the trial
        return f"raised {type(exc).__name__}: {exc}"
    why = _close(out, reference, tol, "output")
    for n, g, r in zip(names, grads, ref_grads, strict=True):
        why = why or _close(g, r, tol, f"grad of {n}")
    return why
