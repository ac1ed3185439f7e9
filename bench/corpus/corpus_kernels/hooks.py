"""An inputs hook: attention inputs built by the user's code, still in the case's value distribution (through
the `generate` helper) and with the dims [ops.inputs] declares, so the error bound keeps its lengths and its
P|V| scale."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np


def attention_inputs(
    rng: object,
    dims: Mapping[str, int],
    dtype: str,
    kwargs: Mapping[str, object],
    generate: Callable[..., np.ndarray],
) -> dict[str, np.ndarray]:
    shape = (dims["B"], dims["S"], dims["D"])
    keys = (dims["B"], dims["SK"], dims["D"])
    return {"q": generate(shape, name="q"), "k": generate(keys, name="k"), "v": generate(keys, name="v")}
