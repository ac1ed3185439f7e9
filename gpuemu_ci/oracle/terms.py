"""The shape every bound term shares: a term is one object with a name, a line saying what it models, when it
applies, the allowance it adds and the words it adds to a failure message. Each family of allowances declares
its terms in one ordered list (`forward_terms.FORWARD_TERMS` for an op's outputs, `gradient_terms.GRADIENT_TERMS`
for its gradients), and the bound iterates that list: a new term is one module and one line in a list.

The list's order is the order in which terms are added (floating-point addition is not associative, so the
order is part of the verdict) and the order of their words in a message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol, TypeVar

import numpy as np

from gpuemu_ci.config.model import Family, OpSpec
from gpuemu_ci.oracle.model import Comparator

if TYPE_CHECKING:  # bounds.py imports the terms; the case only names its record
    from gpuemu_ci.oracle.bounds import BoundInputs
    from gpuemu_ci.oracle.row_statistics import Forward

Allowance = np.ndarray | float  # an absolute allowance before the bound's c: per element, or one for all


@dataclass(frozen=True)
class ForwardCase:
    """One output of one case, as the terms of the forward bound see it: the case, and what the family's own
    bound already worked out (u_acc, n, the family's scale S)."""

    op: OpSpec
    bound: BoundInputs
    family: Family
    u_acc: float  # the accumulator's unit roundoff (bounds.accumulator_roundoff)
    n: int  # the length each output element sums (bounds.contracted_length; 1 where only words are asked)
    scale: np.ndarray | None = None  # the family's S where it has one (matmul, reductions, scans, argmax)
    output: np.ndarray | None = None  # the op's output, when a message is being written
    first_dims: tuple[str | int, ...] | None = (
        None  # the first input's dims when the output is shaped like it
    )

    @property
    def absolute(self) -> np.ndarray:
        """|reference|."""
        return np.asarray(np.abs(self.bound.reference))


@dataclass(frozen=True)
class GradientTermCase:
    """One gradient of one case, as the terms of the gradients' list see it. `n`, `u_acc` and `scale` are the
    structure bound's (gradients.structure_bound); where only words are asked they keep their defaults."""

    op: OpSpec
    dtype: str  # the case dtype
    name: str  # the input the gradient is of
    reference: np.ndarray  # the float64 gradient
    grad_dtype: str
    rule: Comparator  # the rule judging the gradient (gradients.rule_for)
    dims: Mapping[str, int] = field(default_factory=dict)
    kwargs: Mapping[str, object] = field(default_factory=dict)
    inputs: Mapping[str, np.ndarray] = field(default_factory=dict)
    upstream: Sequence[np.ndarray | None] = ()
    forward: Forward | None = None  # what the op's backward computed from (row_statistics.Forward)
    correlated: bool = False
    n: int = 1  # the length each element of the gradient sums (gradients.summed_length)
    u_acc: float = 0.0
    scale: np.ndarray | None = None  # the terms' scale S of the structure bound
    products: np.ndarray | None = None  # |g x|: the upstream gradient times the input (elementwise ops)
    mismatched: bool = False  # whether the gradient exceeded its allowance (for the words)


Case = TypeVar("Case", contravariant=True)


class BoundTerm(Protocol[Case]):
    """One term of a bound: what it is called, what it models, when it applies, what it adds, what it says."""

    @property
    def name(self) -> str:
        """A short name, unique in its list (the oracle map in ARCHITECTURE.md shows it)."""
        ...

    @property
    def models(self) -> str:
        """One line: the arithmetic the term allows for."""
        ...

    def applies(self, case: Case) -> bool:
        """Whether the term adds to this case's allowance at all (its family, its dtype, its declarations)."""
        ...

    def allowance(self, case: Case) -> Allowance:
        """The absolute allowance it adds, before the bound's c; only asked where `applies`."""
        ...

    def words(self, case: Case) -> str:
        """What a failure's message adds about it ("; the bound counts ..."), empty where it added nothing.
        Asked of every term of the list whenever a comparison by the bound failed."""
        ...


class OfFamilies:
    """A forward term that applies to the cases of some families (`families`), whatever else they hold."""

    families: ClassVar[frozenset[Family]]

    def applies(self, case: ForwardCase) -> bool:
        """Whether the case's family is one of `families`."""
        return case.family in self.families


class SpeaksOnly:
    """A gradient term that only speaks: its allowance is counted elsewhere (it widens the structure bound's
    scale, or it is a rule's own floor), so it never applies as an added term."""

    def applies(self, case: GradientTermCase) -> bool:
        """Never: see the class."""
        return False

    def allowance(self, case: GradientTermCase) -> Allowance:
        """0: see the class."""
        return 0.0


def row_axis(kwargs: Mapping[str, object]) -> int:
    """The axis a row-wise op works along: its `axis` or `dim` kwarg, else the last."""
    for key in ("axis", "dim"):
        value = kwargs.get(key)
        if isinstance(value, int):
            return value
    return -1


def add_terms(terms: Sequence[BoundTerm[Case]], case: Case, total: np.ndarray) -> np.ndarray:
    """total plus every applying term's allowance, in the list's order."""
    for term in terms:
        if term.applies(case):
            total = total + term.allowance(case)
    return total


def words_of(terms: Sequence[BoundTerm[Case]], case: Case) -> str:
    """Every term's words, in the list's order."""
    return "".join(term.words(case) for term in terms)
