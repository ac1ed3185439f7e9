"""The mutation part of results.json (`gpuemu-ci mutate`): per op, the planted bugs (mutants) of its kernels,
what became of each, and the score.

A mutant is `killed` when the op's suite fails it (`killed_by` says the kind of finding, `case` the first case
that failed, in plan order), `survived` when every case passed with outputs that differ from the original's,
`equivalent?` when every case passed with outputs bit for bit the original's (perhaps a change that cannot
matter, perhaps one no case reaches), `errored` when it could not be run as a mutant (its source did not build,
the op did not load with it), and `not run` when it was not tried here (a CUDA mutant without a GPU, the time
budget, another shard). The score counts killed of killed + survived: the other statuses say nothing about the
suite. A CUDA kernel whose cases cannot run here (no GPU, or no launch table) is `lint_only`: the lint kills a
mutant that breaks an artifact check, calls one that compiles to the original's PTX `equivalent?`, and leaves
the others `not run`; it has no score.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import msgspec

from gpuemu_ci.results.base import Count, Record, Sha256

MIN_SCORE_NOTE = "mutation score under --min-score"  # the note of a run that --min-score failed


class MutantStatus(StrEnum):
    """What became of a mutant: killed, survived, equivalent (no output changed), errored or not run."""

    KILLED = "killed"
    SURVIVED = "survived"
    EQUIVALENT = "equivalent?"
    ERRORED = "errored"
    NOT_RUN = "not run"


class MutantResult(Record, frozen=True):
    """One mutant: where it changed which kernel, and what the suite made of it."""

    id: str  # stable while the kernel's source and the change stay the same
    number: Count  # its place in the op's plan (1-based), as the terminal and the reports name it
    operator: str
    kernel: str  # "module.function"
    file: str  # the kernel's file: relative to gpuemu.toml's directory, else the module's path
    line: Count
    before: str  # the changed line(s) as written
    after: str  # the same line(s) changed
    status: MutantStatus
    killed_by: str | None = None  # the kind of the first finding that failed it
    case: str | None = None  # the first case that failed it (plan order)
    case_seed: str | None = None  # that case's seed, for `gpuemu-ci replay`
    message: str | None = None  # the first finding, an error, or why it did not run
    hint: str | None = None  # a survivor or an `equivalent?`: what the config likely lacks to kill it
    cached: bool = False  # the verdict came from the cache (same kernel source, change, config, seed, tool)


class OpMutation(Record, frozen=True):
    """The mutants of one op (or one CUDA [[kernels]] entry) and its score."""

    op: str
    language: str  # "triton" or "cuda"
    scored: bool  # False: the original did not pass its own suite (or lint), or no kernel could be changed
    message: str | None = None
    lint_only_because: str | None = None  # CUDA: why its cases could not run here (only the lint judged)
    kernels: tuple[str, ...] = ()  # "module.function" of the kernels changed
    mutants_planned: Count = 0  # every mutant the operators made for the op's kernels
    mutants: tuple[MutantResult, ...] = ()  # those this run selected (--max-mutants), in plan order
    killed: Count = 0
    survived: Count = 0
    equivalent: Count = 0
    errored: Count = 0
    not_run: Count = 0
    score: float | None = None  # killed / (killed + survived); None when neither happened

    def __post_init__(self) -> None:
        super().__post_init__()
        counts = {status: 0 for status in MutantStatus}
        for mutant in self.mutants:
            counts[mutant.status] += 1
        decided = counts[MutantStatus.KILLED] + counts[MutantStatus.SURVIVED]
        figures = {
            "killed": counts[MutantStatus.KILLED],
            "survived": counts[MutantStatus.SURVIVED],
            "equivalent": counts[MutantStatus.EQUIVALENT],
            "errored": counts[MutantStatus.ERRORED],
            "not_run": counts[MutantStatus.NOT_RUN],
            "score": round(counts[MutantStatus.KILLED] / decided, 4)
            if decided and not self.lint_only
            else None,
        }
        for name, value in figures.items():
            msgspec.structs.force_setattr(self, name, value)

    @property
    def lint_only(self) -> bool:
        """Whether the op's mutants were judged by the lint alone (its score could not be measured here)."""
        return self.lint_only_because is not None

    @property
    def survivors(self) -> tuple[MutantResult, ...]:
        """The mutants the suite did not kill."""
        return tuple(m for m in self.mutants if m.status is MutantStatus.SURVIVED)


class MutationShard(Record, frozen=True):
    """The part of the mutants this document ran (`gpuemu-ci mutate --shard K/N`); `gpuemu-ci merge` puts the
    N parts back together and refuses parts of different plans."""

    index: Annotated[int, msgspec.Meta(ge=1)]
    count: Annotated[int, msgspec.Meta(ge=1)]
    plan: Sha256  # every op's mutants, in plan order, with the config, seed and operators they came from


class MutationReport(Record, frozen=True):
    """What `gpuemu-ci mutate` did: the operators it used, its limits, and every op's mutants."""

    operators: tuple[str, ...]
    max_mutants: Count | None = None  # per op (--max-mutants); None: every mutant
    min_score: float | None = None  # --min-score: an op scored below it fails the run
    ops: tuple[OpMutation, ...] = ()
    cut_short: bool = False  # the time budget ran out: some mutants were not run
    duration_s: float = 0.0
    shard: MutationShard | None = None  # set in the document of one shard; never in a merged or whole run

    @property
    def killed(self) -> int:
        """The mutants killed, over every op."""
        return sum(op.killed for op in self.ops)

    @property
    def decided(self) -> int:
        """The mutants killed or survived (those that count toward a score), over every op."""
        return sum(op.killed + op.survived for op in self.ops)

    def below_min_score(self) -> tuple[OpMutation, ...]:
        """The scored ops under --min-score, and the lint-only ones (whose score could not be measured here:
        a rule that could not be checked fails)."""
        if self.min_score is None:
            return ()
        return tuple(
            op
            for op in self.ops
            if (op.score is not None and op.score < self.min_score) or (op.lint_only and op.scored)
        )
