"""Where an op's seconds went (`OpResult.timings`): measured by the workers and the pool, summed over the op's
cases. Clock readings, never part of a verdict: nothing that decides or counts a case reads them, the signed
statement's rows leave them out, and every comparison of two documents (`.ci/hashseed-check`, shard merges,
the tests) drops the `timings` key as it drops `duration_s`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpuemu_ci.results.base import Count, Record

# The phases of a case, in the order a case goes through them, with what each covers (the `--profile` table
# and docs/benchmarks.md use the same words).
PHASES: dict[str, str] = {
    "worker_start": "starting worker processes (to their first message), charged to the case that waited",
    "load": "importing the op, its reference and their hooks in a worker",
    "inputs": "generating the case's inputs from the seed, on both sides, and their digests",
    "triton_prepare": "Triton launch preparation: tracing tapes, passes abandoned for one program at a time",
    "op": "the op's calls (and its re-run and probes), less Triton launch preparation",
    "reference": "the fp64 reference's calls (also on |inputs|, on moved inputs) and the naive implementation",
    "judge": "judging the outputs with the error model, snapshots of failures",
    "transport": "the pool's scheduling, messages and output arenas (a side's time in the pool less its worker's)",
    "explain": "the explain re-runs of the recorded failures, every phase of theirs (store maps, shadow, probes)",
}


class OpTimings(Record, frozen=True):
    """Seconds per phase (PHASES) summed over an op's cases and both their sides; `cases` counts the cases
    that reported a split. Wall-clock seconds of each process: with several jobs they overlap, so their sum
    exceeds the run's wall time."""

    cases: Count = 0
    worker_start_s: float = 0.0
    load_s: float = 0.0
    inputs_s: float = 0.0
    triton_prepare_s: float = 0.0
    op_s: float = 0.0
    reference_s: float = 0.0
    judge_s: float = 0.0
    transport_s: float = 0.0
    explain_s: float = 0.0

    @classmethod
    def of_micros(cls, cases: int, micros: Mapping[str, int]) -> OpTimings:
        """From whole microseconds per phase (sums that do not depend on the order cases arrive in)."""
        return cls(cases=cases, **{f"{phase}_s": micros.get(phase, 0) / 1e6 for phase in PHASES})

    def seconds(self) -> dict[str, float]:
        """Phase -> seconds, in PHASES order."""
        return {phase: float(getattr(self, f"{phase}_s")) for phase in PHASES}

    @property
    def total_s(self) -> float:
        """The seconds of every phase together (the work the split accounts for, not the op's wall time)."""
        return sum(self.seconds().values())


def summed(timings: Iterable[OpTimings | None]) -> OpTimings | None:
    """The sum of several splits (an op's shards, or every op of a run); None when none has one."""
    present = [t for t in timings if t is not None]
    if not present:
        return None
    micros = {phase: sum(round(t.seconds()[phase] * 1e6) for t in present) for phase in PHASES}
    return OpTimings.of_micros(sum(t.cases for t in present), micros)
