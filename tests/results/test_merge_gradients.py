"""Per-gradient figures of `backward = true` ops merge the same in any order (a sharded run equals the
unsharded one)."""

from __future__ import annotations

import itertools

from gpuemu_ci.results.model import GradientResult
from gpuemu_ci.results.rules import merge_gradients


def test_gradient_rows_merge_to_the_worst_in_any_order():
    shards = [
        (GradientResult("x", "bound", 0.5, 1e-3), GradientResult("w", "bound", 0.1, 2e-3)),
        (GradientResult("x", "bound", 0.7, 5e-4),),
        (GradientResult("w", "bound", None, None), GradientResult("x", "bound", 0.2, 9e-3)),
    ]
    results = {merge_gradients(list(order)) for order in itertools.permutations(shards)}
    assert results == {(GradientResult("w", "bound", 0.1, 2e-3), GradientResult("x", "bound", 0.7, 9e-3))}
