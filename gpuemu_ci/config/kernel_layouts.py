"""What a [[kernels]] launch implies for its op: the memory layouts it can be handed, and flushed subnormals.

A CUDA kernel receives a bare pointer: it knows an input's strides only through the arguments its launch passes
(`stride(x, 0)`). Handing it a layout whose strides it is never told would make every correct kernel fail, so an
input is drawn only in the layouts whose changed strides the launch's `args` pass. A layout the user asks for by
name on an input that cannot take it is a config error; narrowed defaults are documented (docs/config.md).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from gpuemu_ci.config.model import InputSpec, Layout, OpSpec

_STRIDE_ARG = re.compile(r"\bstride\(\s*([A-Za-z_]\w*)\s*,\s*(-?\d+)\s*\)")


def passed_strides(args: Iterable[str]) -> dict[str, set[int]]:
    """{input: dims whose stride the launch passes}, from `stride(x, d)` anywhere in the args (negative d kept)."""
    passed: dict[str, set[int]] = {}
    for arg in args:
        for name, dim in _STRIDE_ARG.findall(arg):
            passed.setdefault(name, set()).add(int(dim))
    return passed


def changed_dims(layout: Layout, ndim: int) -> set[int]:
    """The dims (of size > 1) whose stride the layout may make differ from C order (fuzz/layouts.py)."""
    if layout in (Layout.CONTIGUOUS, Layout.ODD_SIZE1):  # odd_size1 only touches size-1 dims' strides
        return set()
    if layout is Layout.TRANSPOSED:
        return {ndim - 2, ndim - 1} if ndim >= 2 else set()
    if layout is Layout.ROW_PADDED:
        return set(range(ndim - 1))
    return set(range(ndim))  # strided: every dim; broadcast: the stride-0 dim is drawn per case


def missing_strides(layout: Layout, ndim: int, passed: set[int]) -> list[int]:
    """The dims a kernel would need the stride of to read this layout, and is not given."""
    given = {d % ndim for d in passed} if ndim else set()
    return sorted(changed_dims(layout, ndim) - given)


def fit_layouts(op: OpSpec, args: Iterable[str], op_layouts_explicit: bool) -> tuple[OpSpec, list[str]]:
    """The kernel's op with each input's layouts narrowed to what its launch can address, and the problems:
    an input that names a layout it cannot take, or an op-level layout no input can take (when written)."""
    passed = passed_strides(args)
    problems: list[str] = []
    inputs: list[InputSpec] = []
    usable_somewhere: set[Layout] = set()
    for spec in op.shapes.inputs:
        wanted = spec.layouts if spec.layouts is not None else op.shapes.layouts
        missing = {lay: missing_strides(lay, len(spec.dims), passed.get(spec.name, set())) for lay in wanted}
        fits = tuple(lay for lay in wanted if not missing[lay])
        usable_somewhere.update(fits)
        if spec.layouts is not None:  # named for this input: each one it cannot take is the user's mistake
            problems.extend(_why(spec.name, lay, missing[lay]) for lay in wanted if missing[lay])
        inputs.append(dataclasses.replace(spec, layouts=fits or (Layout.CONTIGUOUS,)))
    if op_layouts_explicit and op.shapes.inputs:
        for lay in op.shapes.layouts:
            if lay not in usable_somewhere:
                first = op.shapes.inputs[0]
                needed = missing_strides(lay, len(first.dims), passed.get(first.name, set()))
                problems.append(_why(first.name, lay, needed) + " (and no other input can take it either)")
    shapes = dataclasses.replace(op.shapes, inputs=tuple(inputs))
    return dataclasses.replace(op, shapes=shapes), problems


def _why(name: str, layout: Layout, missing: list[int]) -> str:
    strides = ", ".join(f"stride({name}, {d})" for d in missing)
    return (
        f"input {name!r} in layout {layout.value!r} needs the kernel to know {strides}, which [kernels.launch] "
        f"args do not pass: add them to args (and use them in the kernel), or drop {layout.value!r}"
    )


def flushes_subnormals(flags: Iterable[str]) -> bool:
    """Whether nvcc/NVRTC flags build the kernel with subnormals flushed to zero: `-ftz=true`, or
    `--use_fast_math` (which implies it) unless a later `-ftz=false` turns it off."""
    flush = False
    for flag in flags:
        name, _, value = flag.lstrip("-").partition("=")
        if name == "use_fast_math":
            flush = True
        elif name == "ftz":
            flush = value.strip().lower() in ("true", "1", "")
    return flush
