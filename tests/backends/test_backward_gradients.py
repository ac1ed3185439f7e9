"""The upstream gradient of a `backward = true` case (backends/backward.py): drawn from the case seed, so the
op's process and the judge's draw the same one, in the output's shape and dtype and the case's distribution."""

from __future__ import annotations

import numpy as np
import pytest

from gpuemu_ci.backends.backward import ordered_gradients, upstream_gradients
from gpuemu_ci.backends.frameworks import BadOutput
from gpuemu_ci.plan.model import ValueMode


def test_same_seed_same_upstream_gradient_in_the_outputs_shape_and_dtype():
    outputs = (np.zeros((3, 5), np.float32), np.zeros(4, np.int64), np.zeros(7, np.float32))
    first = upstream_gradients(11, outputs, "bfloat16", ValueMode.REGULAR, {"M": 3})
    again = upstream_gradients(11, outputs, "bfloat16", ValueMode.REGULAR, {"M": 3})
    assert first[1] is None  # an integer output gets none
    assert first[0] is not None and first[0].shape == (3, 5) and first[0].dtype.name == "bfloat16"
    assert first[0].tobytes() == again[0].tobytes()  # type: ignore[union-attr]
    other = upstream_gradients(12, outputs, "bfloat16", ValueMode.REGULAR, {"M": 3})
    assert first[0].tobytes() != other[0].tobytes()  # type: ignore[union-attr]
    assert np.all(np.isfinite(first[2].astype(np.float64)))  # type: ignore[union-attr]


def test_each_value_mode_gives_finite_moderate_gradients():
    for mode in ValueMode:
        (g,) = upstream_gradients(3, (np.zeros((8, 64), np.float16),), "float16", mode, {})
        assert g is not None
        values = g.astype(np.float64)
        assert np.all(np.isfinite(values)) and np.abs(values).max() < 1e4, mode


def test_vjp_answers_in_either_form_and_refuses_gradients_nobody_asked_for():
    a, b = np.ones(2), np.zeros(2)
    assert ordered_gradients({"y": b, "x": a}, ("x", "y"), ("x", "y", "t")) == (a, b)
    assert ordered_gradients((a, b), ("x", "y"), ("x", "y")) == (a, b)
    with pytest.raises(BadOutput, match="gradient for t"):
        ordered_gradients({"x": a, "y": b, "t": a}, ("x", "y"), ("x", "y", "t"))
    with pytest.raises(BadOutput, match="no gradient for y"):
        ordered_gradients({"x": a}, ("x", "y"), ("x", "y"))
    with pytest.raises(BadOutput, match="returned 1 gradients for 2"):
        ordered_gradients(a, ("x", "y"), ("x", "y"))


def test_a_float64_upstream_gradient_holds_no_subnormal_and_narrower_dtypes_keep_theirs():
    """The float64 reference cannot differentiate through a subnormal upstream gradient (no wider range): torch's
    float64 var backward of a row holding -2.3e77 with g = -5e-324 is 7.6e-247 where the reference computed 0."""
    shape = (64, 64)
    for dtype, keeps in (("float64", False), ("float32", True), ("float16", True)):
        found = False
        for seed in range(8):
            (g,) = upstream_gradients(seed, (np.zeros(shape, dtype),), dtype, ValueMode.BOUNDARY, {})
            assert g is not None and g.dtype == np.dtype(dtype)
            values = np.abs(g.astype(np.float64))
            found |= bool(np.any((values > 0) & (values < np.finfo(dtype).tiny)))
        assert found == keeps, dtype
