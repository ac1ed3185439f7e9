"""The backward pass of an op declared `backward = true`, in the processes that run user code.

A case's backward belongs to the case: the same seed, the same inputs. The upstream gradient of each float
output is drawn from the case seed (`SeededRng(seed).derive("grad_output_<i>")`, the case's value
distribution, the output's shape and dtype), so the op's process and the judge's draw the same one.

- The op side (`with_backward`): the op's call becomes forward + backward. Torch ops run under autograd with
  `requires_grad` on the inputs in `grad_inputs` (one `torch.autograd.grad`, no `retain_graph`); other
  frameworks call the declared `vjp`. The gradients are returned after the forward outputs, in the order of
  the case's gradient inputs, so they cross to the judge through the arena like any output.
- The judge side (`reference_vjp`): the reference's vector-Jacobian product, by torch autograd on float64
  tensors of the same rounded inputs, or the declared `vjp_reference` on NumPy arrays; in float64 for the
  comparison, and in the working precision for the baseline-relative rule (oracle/gradients.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from gpuemu_ci import dtypes
from gpuemu_ci.backends.frameworks import BadOutput, to_numpy_outputs
from gpuemu_ci.backends.loaded import Invoke
from gpuemu_ci.config.model import Framework, InputSpec, OpSpec
from gpuemu_ci.fuzz.values import generate
from gpuemu_ci.plan.model import ValueMode
from gpuemu_ci.rng.xorshift import SeededRng

GRAD_OUTPUT_KWARG = "grad_output"  # how `vjp` and `vjp_reference` receive the upstream gradient(s)


def gradient_names(op: OpSpec, arrays: Mapping[str, np.ndarray]) -> tuple[str, ...]:
    """The inputs of this case whose gradient is checked: `grad_inputs` that hold floats here."""
    if op.backward is None:
        return ()
    return tuple(
        name
        for name in op.backward.grad_inputs
        if name in arrays and dtypes.is_float_dtype(np.asarray(arrays[name]).dtype)
    )


def label(name: str) -> str:
    """How results name a gradient: "grad of x"."""
    return f"grad of {name}"


def upstream_gradient(
    seed: int, position: int, shape: tuple[int, ...], dtype: str, mode: ValueMode, dims: Mapping[str, int]
) -> np.ndarray:
    """The upstream gradient of the op's output `position`: from the case seed, in the case's value
    distribution, O(1) in magnitude (as attention inputs are: a loss's gradient is not 1e30).

    In a float64 case its subnormal values become the smallest normal of their sign: the float64 reference
    differentiates in the same dtype, with no wider range, so through an upstream of 5e-324 it computes
    g / 3 = 0 and then 0 times 4.6e77 where the exact gradient, which torch's var backward returns, is 7.6e-247.
    A 16-bit or float32 case keeps its subnormal upstream values: float64 resolves them."""
    spec = InputSpec(f"grad_output_{position}", tuple(shape), dtype)
    rng = SeededRng(seed).derive(f"grad_output_{position}")
    if mode is ValueMode.CAPTURED:
        mode = ValueMode.REGULAR  # captured inputs have no distribution to follow
    values = generate(spec, tuple(shape), dtype, mode, rng, dims, tame=True)
    if dtype == "float64":
        smallest = dtypes.info(dtype).min_normal
        subnormal = (values != 0) & (np.abs(values) < smallest)
        values = np.where(subnormal, np.copysign(smallest, values), values)
    return values


def upstream_gradients(
    seed: int,
    outputs: tuple[np.ndarray, ...],
    dtype: str,
    mode: ValueMode,
    dims: Mapping[str, int],
    per_output: tuple[str, ...] = (),
) -> tuple[np.ndarray | None, ...]:
    """One upstream gradient per float output (None for integer outputs), in the output's dtype: `per_output`
    (the op's `output_dtype` list) where it names one, else `dtype`."""
    return tuple(
        upstream_gradient(
            seed, i, tuple(np.shape(o)), per_output[i] if i < len(per_output) else dtype, mode, dims
        )
        if dtypes.is_float_dtype(np.asarray(o).dtype)
        else None
        for i, o in enumerate(outputs)
    )


class BackwardFailed(Exception):
    """The op's backward raised or returned something unusable (the message says which)."""


def with_backward(
    invoke: Invoke,
    framework: Framework,
    names: tuple[str, ...],
    make_upstream: Callable[[tuple[np.ndarray, ...]], tuple[np.ndarray | None, ...]],
    vjp: Invoke | None,
    to_native: Callable[[np.ndarray], Any],
) -> Invoke:
    """The op's call as forward + backward: returns the forward outputs followed by the gradients of `names`.
    `make_upstream` draws the upstream gradients for the forward outputs (as NumPy); `to_native` hands one to
    the op's framework."""

    def torch_call(inputs: dict[str, Any], kwargs: dict[str, Any]) -> Any:
        import torch

        leaves = []
        for name in names:
            leaf = inputs[name]
            if not isinstance(leaf, torch.Tensor):
                raise BackwardFailed(f"input {name} is not a torch tensor")
            leaf.requires_grad_(True)
            leaves.append(leaf)
        result = invoke(inputs, kwargs)
        outputs = result if isinstance(result, tuple | list) else (result,)
        forward = to_numpy_outputs(result)
        upstream = make_upstream(forward)
        grads = _autograd(
            outputs,
            [None if g is None else to_native(g) for g in upstream],
            leaves,
            "no output of the op requires a gradient: it is not differentiable through torch autograd "
            "(detached, or computed outside torch)",
        )
        for leaf in leaves:
            leaf.requires_grad_(False)
        return (*forward, *(g.detach() for g in grads))

    def vjp_call(inputs: dict[str, Any], kwargs: dict[str, Any]) -> Any:
        assert vjp is not None
        result = invoke(inputs, kwargs)
        forward = to_numpy_outputs(result)
        upstream = [to_native(g) if g is not None else None for g in make_upstream(forward)]
        grad_output = upstream[0] if len(upstream) == 1 else tuple(upstream)
        given = vjp(dict(inputs), {**kwargs, GRAD_OUTPUT_KWARG: grad_output})
        return (*forward, *ordered_gradients(given, names, tuple(inputs)))

    return vjp_call if vjp is not None else torch_call


def ordered_gradients(given: Any, names: tuple[str, ...], all_inputs: tuple[str, ...]) -> tuple[Any, ...]:
    """A vjp's answer (a dict name -> gradient, or a tuple in the order of `names`) in the order of `names`.
    A gradient for an input that does not require one is an error: the caller would accumulate it."""
    if isinstance(given, dict):
        extra = sorted(set(given) - set(names))
        if extra:
            unknown = [n for n in extra if n not in all_inputs]
            what = "unknown inputs" if unknown else "inputs that do not require one"
            raise BadOutput(f"the backward returned a gradient for {', '.join(extra)} ({what})")
        missing = [n for n in names if given.get(n) is None]
        if missing:
            raise BadOutput(f"the backward returned no gradient for {', '.join(missing)}")
        return tuple(given[n] for n in names)
    items = tuple(given) if isinstance(given, tuple | list) else (given,)
    if len(items) != len(names):
        raise BadOutput(
            f"the backward returned {len(items)} gradients for {len(names)} inputs requiring one "
            f"({', '.join(names)}); return a dict name -> gradient"
        )
    return items


def reference_vjp(
    reference: Invoke,
    vjp_reference: Invoke | None,
    inputs: Mapping[str, np.ndarray],
    kwargs: Mapping[str, Any],
    names: tuple[str, ...],
    upstream: tuple[np.ndarray | None, ...],
    dtype: np.dtype,
) -> tuple[np.ndarray, ...]:
    """The reference's gradients of `names` (as float64 NumPy arrays) for the upstream gradients, computed in
    `dtype` (float64, or the working precision): float inputs and upstream gradients are cast to it."""
    cast = {
        n: np.ascontiguousarray(a, dtype=dtype) if dtypes.is_float_dtype(a.dtype) else np.ascontiguousarray(a)
        for n, a in inputs.items()
    }
    grads_in = tuple(None if g is None else np.ascontiguousarray(g, dtype=dtype) for g in upstream)
    if vjp_reference is not None:
        grad_output = grads_in[0] if len(grads_in) == 1 else grads_in
        given = vjp_reference(dict(cast), {**kwargs, GRAD_OUTPUT_KWARG: grad_output})
        ordered = ordered_gradients(given, names, tuple(inputs))
        return tuple(np.asarray(to_numpy_outputs(g)[0], dtype=np.float64) for g in ordered)

    tensors = {n: _torch_tensor(a) for n, a in cast.items()}
    leaves = [tensors[n].requires_grad_(True) for n in names]
    try:
        result = reference(tensors, dict(kwargs))
    except Exception as exc:  # a NumPy reference handed tensors: say what to do, not just what broke
        raise BackwardFailed(
            f"calling the reference on torch tensors raised {type(exc).__name__}: {str(exc)[:300]}; its "
            "gradients come from torch autograd, so it must compute with torch on the tensors it is given, or "
            'give `vjp_reference = "pkg.mod:func"`'
        ) from None
    outputs = result if isinstance(result, tuple | list) else (result,)
    grads = _autograd(
        outputs,
        [None if g is None else _torch_tensor(g) for g in grads_in],
        leaves,
        "the reference is not differentiable by torch autograd (it must compute with torch on the tensors it "
        'is given, or give `vjp_reference = "pkg.mod:func"`)',
    )
    return tuple(g.detach().double().numpy() for g in grads)


def _torch_tensor(a: np.ndarray) -> Any:
    """torch.from_numpy, for bfloat16 too (NumPy's is ml_dtypes', which torch reads through its bits)."""
    import torch

    if a.dtype == dtypes.info("bfloat16").numpy:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _autograd(
    outputs: Sequence[Any], upstream: Sequence[Any], leaves: Sequence[Any], not_differentiable: str
) -> Any:
    """The vector-Jacobian product of the outputs that require a gradient with their upstream gradients, one
    gradient per leaf (zeros for a leaf no output depends on); `not_differentiable` when no output requires one."""
    import torch

    pairs = [
        (out, grad)
        for out, grad in zip(outputs, upstream, strict=False)
        if grad is not None and isinstance(out, torch.Tensor) and out.requires_grad
    ]
    if not pairs:
        raise BackwardFailed(not_differentiable)
    return torch.autograd.grad(
        [out for out, _ in pairs],
        list(leaves),
        grad_outputs=[grad for _, grad in pairs],
        allow_unused=True,
        materialize_grads=True,
    )
