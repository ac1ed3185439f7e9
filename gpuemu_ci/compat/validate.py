"""Upstream's `gpuemu.validate`: the `validate_op` context manager (and `validate_pytorch`, the same for torch
tensors), and the `fuzz_shapes`, `fuzz_dtypes` and `fuzz_layouts` generators for hand-written loops.

    with validate_op(client, "fused_gelu", {"x": x}) as ctx:
        ctx["output"] = fused_gelu(x)

On leaving the block the output is judged against the op's fp64 reference (from gpuemu.toml) on exactly these
inputs; a mismatch raises ValidationError (an AssertionError) listing the findings. An output never set, or
inputs that do not fit the op's declared inputs, raise too: nothing passes unjudged."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from gpuemu_ci.compat.single_call import ValidationError, ValidationResult, judge_call

if TYPE_CHECKING:
    from gpuemu_ci.compat.client import Client


@contextmanager
def validate_op(
    client: Client,
    op_name: str,
    inputs: Mapping[str, Any],
    *,
    atol: float | None = None,
    rtol: float | None = None,
    raise_on_failure: bool = True,
    **kwargs: Any,
) -> Iterator[dict[str, Any]]:
    """Judge the output the block stores in `ctx["output"]`; `kwargs` are the op's kwargs for the reference."""
    context: dict[str, Any] = {}
    yield context
    if "output" not in context:
        raise ValidationError(
            f'validate_op({op_name!r}): no output captured; set ctx["output"] inside the with block',
            ValidationResult(op_name, False, [{"kind": "no_output", "message": "no output captured"}]),
        )
    result = judge_call(
        client.config,
        op_name,
        inputs,
        context["output"],
        kwargs,
        atol=atol,
        rtol=rtol,
        capture_dir=client.out_dir,
    )
    context["result"] = result
    if not result.passed and raise_on_failure:
        lines = [f"{f['kind']}: {f['message']}" for f in result.failures[:3]]
        raise ValidationError(f"{op_name} failed validation:\n" + "\n".join(lines), result)


def fuzz_shapes(**dims: list[int]) -> Iterator[tuple[int, ...]]:
    """Every combination of the given sizes, in the order given (`for b, s, h in fuzz_shapes(batch=[...],
    seq=[...], hidden=[...])`)."""
    yield from itertools.product(*dims.values())


def fuzz_dtypes(dtypes: list[str]) -> Iterator[str]:
    """The dtypes given, each once, in order."""
    yield from dict.fromkeys(dtypes)


def fuzz_layouts(base_shape: tuple[int, ...]) -> Iterator[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(shape, element strides) views that fit in a contiguous tensor of `base_shape` (for `as_strided`): the
    contiguous layout, the last two dims transposed, and a row-padded slice (half of the last dim, rows keeping
    their full stride). Non-contiguous layouts are skipped where the shape has no room for them."""
    shape = tuple(base_shape)
    strides = tuple(int(_prod(shape[i + 1 :])) for i in range(len(shape)))
    yield shape, strides
    if len(shape) >= 2:
        yield (*shape[:-2], shape[-1], shape[-2]), (*strides[:-2], strides[-1], strides[-2])
    if shape and shape[-1] >= 2:
        yield (*shape[:-1], shape[-1] // 2), strides


def _prod(values: tuple[int, ...]) -> int:
    total = 1
    for value in values:
        total *= value
    return total
