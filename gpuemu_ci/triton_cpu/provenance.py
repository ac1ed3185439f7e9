"""Which kernel argument a pointer value was made from.

The interpreter's pointer values are bare addresses. Each argument's pointer is tagged with the argument's name
(in the interpreter's TensorHandle.attr), and the builder methods that make pointers from pointers (pointer
arithmetic, splats, broadcasts, reshapes, selects) pass the tag on: an access is then checked against the
argument it was made from alone, so a read past one tensor's end that lands in another argument's memory is
still out of bounds. A pointer of unknown origin (loaded from memory, made from an integer) is checked against
every argument.
"""

from __future__ import annotations

from typing import Any

from gpuemu_ci.triton_cpu.boundary import Handle

# The kernel argument a pointer value was made from (pointer arithmetic, splats, broadcasts, reshapes keep it),
# kept in the interpreter's TensorHandle.attr: its accesses are checked against that argument alone, so a read
# past one tensor's end that lands in another argument's memory is still out of bounds.
BASE = "gpuemu_base"
PROVENANCE = (
    "create_addptr",
    "create_splat",
    "create_unsplat",
    "create_broadcast",
    "create_expand_dims",
    "create_reshape",
    "create_trans",
    "create_cat",
    "create_join",
    "create_select",
)


def is_pointer(handle: Handle) -> bool:
    """Whether an interpreter handle holds pointers."""
    import triton.language as tl

    return isinstance(getattr(handle, "dtype", None), tl.pointer_type)


def derived(original: Any) -> Any:
    """A builder method whose pointer result keeps the argument its pointer operands came from."""

    def derived(self: Any, *args: Any, **kwargs: Any) -> Any:
        made = original(self, *args, **kwargs)
        bases = {getattr(a, "attr", {}).get(BASE) for a in args if is_pointer(a)}
        if len(bases) == 1 and isinstance(getattr(made, "attr", None), dict):
            base = bases.pop()
            if base is not None:
                made.attr[BASE] = base
        return made

    return derived


def base_of(handle: Handle) -> str | None:
    """The kernel argument the pointers were derived from, when known."""
    return getattr(handle, "attr", {}).get(BASE)
