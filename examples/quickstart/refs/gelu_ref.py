"""An upstream-style reference script: `reference(inputs: dict, **kwargs)` returning the fp64 result."""

import numpy as np


def reference(inputs, **kwargs):
    x = inputs["x"]
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))
