"""The terms of a gradient's allowance (oracle/gradients.py), in the order they are added and speak.

A new term: a module with one object implementing `terms.BoundTerm[GradientTermCase]`, and one line here. Terms
that apply add to the structure bound (`gradients.structure_bound`) in this order; every term's words go into a
failed gradient's message in this order, whichever rule judged it. Some terms only speak: their allowance widens
the structure bound's scale or is a rule's own floor (their `applies` says which). `python3 -m
tests.oracle.test_oracle_map` regenerates ARCHITECTURE.md's oracle map from this list.
"""

from __future__ import annotations

from gpuemu_ci.oracle import (
    declared_intermediates,
    flushed,
    gathers,
    gradient_accumulators,
    intermediates,
    norm_rows,
    saved_softmax,
)
from gpuemu_ci.oracle.terms import BoundTerm, GradientTermCase

GRADIENT_TERMS: tuple[BoundTerm[GradientTermCase], ...] = (
    intermediates.GRADIENT_TERM,
    declared_intermediates.GRADIENT_TERM,
    saved_softmax.TERM,
    gradient_accumulators.TERM,
    norm_rows.TERM,
    flushed.GRADIENT_TERM,
    gathers.TERM,
)
