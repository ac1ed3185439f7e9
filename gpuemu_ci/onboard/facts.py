"""What one real call of an op looked like: each argument's shape, dtype, strides and (for integer tensors) value
range, or its plain value. Read off torch, NumPy, CuPy and JAX arrays by their common attributes, so recording
imports no framework; written one call per line (JSON) by the recorder, read back by the inference."""

from __future__ import annotations

import math
from typing import Any

import msgspec

from gpuemu_ci import dtypes

SCALAR_TYPES = (bool, int, float, str)


class ArgFacts(msgspec.Struct, frozen=True, omit_defaults=True):
    """One argument (or output) of a call: a tensor's facts, or a scalar's value."""

    kind: str  # "tensor" | "scalar" | "none" | "other"
    shape: tuple[int, ...] = ()
    dtype: str | None = None  # canonical (gpuemu_ci.dtypes) name, or the framework's when it has none
    strides: tuple[int, ...] = ()  # in elements
    contiguous: bool = True
    framework: str | None = None  # "torch" | "numpy" | "cupy" | "jax"
    low: int | None = None  # integer tensors: the smallest and largest value
    high: int | None = None
    value: bool | int | float | str | None = None  # scalars
    type_name: str | None = None  # "other": what it was


class CallFacts(msgspec.Struct, frozen=True):
    """A call: its arguments by parameter name, in the function's order, and its outputs."""

    args: dict[str, ArgFacts]
    outputs: tuple[ArgFacts, ...] = ()
    raised: bool = False  # the call raised: its arguments are known, its outputs are not


def _framework(value: Any) -> str | None:
    module = type(value).__module__.split(".")[0]
    return {"torch": "torch", "numpy": "numpy", "cupy": "cupy", "jax": "jax", "jaxlib": "jax"}.get(module)


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and _framework(value) is not None


def _dtype_name(value: Any) -> str:
    raw = str(value.dtype).removeprefix("torch.")
    return dtypes.canonical(raw) or raw


def _strides(value: Any) -> tuple[tuple[int, ...], bool]:
    """Strides in elements, and whether the tensor is C-contiguous."""
    stride = getattr(value, "stride", None)
    if callable(stride):  # torch
        elements = tuple(int(s) for s in stride())
        return elements, bool(value.is_contiguous())
    byte_strides = getattr(value, "strides", None)
    itemsize = getattr(getattr(value, "dtype", None), "itemsize", None)
    if byte_strides is None or not itemsize:  # JAX: no strides a kernel sees
        shape = tuple(int(d) for d in value.shape)
        return _contiguous_strides(shape), True
    elements = tuple(int(s) // int(itemsize) for s in byte_strides)
    return elements, elements == _contiguous_strides(tuple(int(d) for d in value.shape))


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _integer_range(value: Any, name: str) -> tuple[int | None, int | None]:
    if not (name.startswith(("int", "uint")) and math.prod(value.shape) > 0):
        return None, None
    return int(value.min()), int(value.max())


def facts_of(value: Any) -> ArgFacts:
    """The facts of one argument or output."""
    if value is None:
        return ArgFacts("none")
    if isinstance(value, SCALAR_TYPES):
        return ArgFacts("scalar", value=value)
    if _is_tensor(value):
        name = _dtype_name(value)
        strides, contiguous = _strides(value)
        low, high = _integer_range(value, name)
        return ArgFacts(
            "tensor",
            shape=tuple(int(d) for d in value.shape),
            dtype=name,
            strides=strides,
            contiguous=contiguous,
            framework=_framework(value),
            low=low,
            high=high,
        )
    return ArgFacts("other", type_name=type(value).__qualname__)


def args_facts(bound: dict[str, Any]) -> dict[str, ArgFacts]:
    """The facts (a tensor's shape, dtype, strides and, for integers, value range; a scalar's value) of each
    bound argument of a call, by parameter name."""
    return {name: facts_of(value) for name, value in bound.items()}


def outputs_facts(result: Any) -> tuple[ArgFacts, ...]:
    """The facts of each output of a call (a single result counts as one output)."""
    outputs = result if isinstance(result, tuple | list) else (result,)
    return tuple(facts_of(value) for value in outputs)


ENCODER = msgspec.json.Encoder()
DECODER = msgspec.json.Decoder(CallFacts)
