"""One-line descriptions of a case's inputs for the terminal: shapes always, and the layout and strides of
every input that is not contiguous (a kernel that ignores a stride fails only on those)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

CONTIGUOUS = "contiguous"


def describe_inputs(
    shapes: Mapping[str, tuple[int, ...]],
    strides: Mapping[str, tuple[int, ...]] | None = None,
    layouts: Mapping[str, str] | None = None,
) -> str:
    """``x(4, 65) transposed strides (1, 4), w(65,)``: element strides, as in results.json."""
    parts = []
    for name, shape in shapes.items():
        text = f"{name}{tuple(shape)}"
        layout = (layouts or {}).get(name, CONTIGUOUS)
        if layout != CONTIGUOUS:
            text += f" {layout}"
            if strides and name in strides:
                text += f" strides {tuple(strides[name])}"
        parts.append(text)
    return ", ".join(parts) or "no inputs"


def describe_arrays(arrays: Mapping[str, np.ndarray], layouts: Mapping[str, str] | None = None) -> str:
    """The same for arrays in hand (replay, minimize)."""
    return describe_inputs(
        {name: tuple(a.shape) for name, a in arrays.items()},
        {name: tuple(s // a.itemsize for s in a.strides) for name, a in arrays.items()},
        layouts,
    )
