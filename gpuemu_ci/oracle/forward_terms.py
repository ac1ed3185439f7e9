"""The terms of the forward bound (oracle/bounds.py::allowed_error), in the order they are added and speak.

A new term: a module with one object implementing `terms.BoundTerm[ForwardCase]`, and one line here. The order is
part of the verdict (floating-point addition is not associative); put a new term last unless it must precede
one. `python3 -m tests.oracle.test_oracle_map` regenerates ARCHITECTURE.md's oracle map from this list.
"""

from __future__ import annotations

from gpuemu_ci.oracle import (
    accumulator_floor,
    attention_floor,
    declared_intermediates,
    flushed,
    intermediates,
    log_sum_exp,
    power_sums,
    rounded_dot,
)
from gpuemu_ci.oracle.terms import BoundTerm, ForwardCase

FORWARD_TERMS: tuple[BoundTerm[ForwardCase], ...] = (
    intermediates.TERM,
    rounded_dot.TERM,
    attention_floor.TERM,
    flushed.TERM,
    power_sums.TERM,
    log_sum_exp.TERM,
    accumulator_floor.TERM,
    declared_intermediates.TERM,
)
