"""The types at the layer's boundary with Triton, which ships none.

The interpreter's module is a `ModuleType`; what the layer sets on it and on its classes is a `Patch`; keys of
the caches (kernels, signatures, tapes) are `Hashable`. Triton's own objects (tensor handles, builders, `tl`
types) have no stubs: they are `Any` where the layer receives them from Triton or hands them back, and nowhere
else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

# (owner, attribute name, value): one attribute the layer sets, or the value it puts back.
Patch = tuple[object, str, object]
# A method of the interpreter's builder (or executor), as Triton calls it: Triton's objects in, Triton's out.
Method = Callable[..., Any]


class Handle(Protocol):
    """The interpreter's `TensorHandle`, as far as the layer reads it: its values (during a vectorised pass with a
    leading program axis), its Triton type (untyped) and its attributes (the argument a pointer came from)."""

    data: np.ndarray
    dtype: Any
    attr: dict[str, Any]

    def get_element_ty(self) -> Any:
        """The Triton type of one element (a pointer's pointee)."""
