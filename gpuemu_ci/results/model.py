"""The results document (results.json, schema version 2): one typed model that every stage after the run hands
on, the renderers, the baseline diff, the signed statement, merge and replay read, and `codec` reads and
writes. A document read from a file is validated once, at that boundary; afterwards the types are trusted.

Figures derived from others (the summary counts, the diff's counts) are recomputed whenever a record is
built or read, so no part of a document can disagree with the rows it summarises.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal

import msgspec

from gpuemu_ci.results.base import Count, Record, Seed, Sha256, check_seed
from gpuemu_ci.results.diff import BaselineDiff, DiffStatus
from gpuemu_ci.results.kernels import KernelResult, KernelStatus, LintInfo
from gpuemu_ci.results.mutation import MutationReport
from gpuemu_ci.results.timings import OpTimings

SCHEMA_VERSION: Literal["2"] = "2"
_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


class OpStatus(StrEnum):
    """The outcome of an op, or of one of its dtypes."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    ERROR = "error"


class Verdict(StrEnum):
    """The gate's decision as recorded. What a report states is `Results.headline`."""

    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    INCOMPLETE = "incomplete"  # cut short by the suite timeout: never a pass


class Headline(StrEnum):
    """The verdict a report states: never PASSED when nothing ran or the run was cut short, whatever a
    (possibly forged) document claims."""

    PASSED = "passed"
    FAILED = "FAILED"
    ERROR = "ERROR"
    INCOMPLETE = "INCOMPLETE"


class FailureKind(StrEnum):
    """Why a case failed: a wrong answer (the first group), or the op could not produce one."""

    MISMATCH = "mismatch"
    NONFINITE = "nonfinite"
    INVARIANT = "invariant"
    SHAPE = "shape"
    DTYPE = "dtype"
    INPUTS_MODIFIED = "inputs_modified"
    NONDETERMINISTIC = "nondeterministic"
    BIAS = "bias"
    UNWRITTEN = "unwritten"
    CRASHED = "crashed"
    TIMEOUT = "timeout"
    OOM = "oom"
    RAISED = "raised"
    BAD_OUTPUT = "bad_output"
    OUT_OF_BOUNDS = "out_of_bounds"  # a Triton kernel accessed memory outside its arguments (triton_cpu)
    RACE = "race"  # programs of one Triton launch depend on each other's order (triton_cpu)
    # The op's worker and the judge's built different inputs from the case's seed (an inputs hook that draws its
    # own randomness): the case could not be judged, and the op's other cases are not run.
    INPUTS_DIFFER = "inputs_differ"
    # Outputs depend on masked-off lanes a Triton load without `other` reads (undefined in Triton's language):
    # `[ops.triton] undefined_masked_lanes = "error"`.
    UNDEFINED_MASKED_LANES = "undefined_masked_lanes"
    TAMPERED = (
        "tampered"  # the op changed the Triton layer that checks it during its call (triton_cpu/guard.py)
    )


# The skip reason of an op whose cases all fell in other shards of a sharded run: run there, not skipped.
OTHER_SHARDS = "other shards"


def skipped_count(ops: Sequence[OpResult]) -> int:
    """What did not run here and would have: the cases that ran but were not judged (Triton's interpreter on
    bf16, a case larger than the machine's memory), and each op skipped whole before any case (no GPU) as one.
    Never part of a pass unless the run allowed skips; an op whose cases ran in other shards is not one."""
    whole = sum(
        1
        for op in ops
        if op.status is OpStatus.SKIPPED and not op.cases_skipped and op.skip_reason != OTHER_SHARDS
    )
    return whole + sum(op.cases_skipped for op in ops)


SnapshotPath = Annotated[str, msgspec.Meta(pattern=r"^snapshots/[0-9a-f]{16}\.npz$")]
ErrorMapPath = Annotated[str, msgspec.Meta(pattern=r"^snapshots/[0-9a-f]{16}\.png$")]  # results/error_map.py
DotPrecision = Literal["ieee", "tf32", "tf32x3"]  # a `tl.dot`'s input precision on fp32 inputs


class Failure(Record, frozen=True):
    """One failing (or unjudgeable, `errored`) case with everything needed to replay it."""

    case_id: str
    case_index: int | None
    case_seed: Seed
    dtype: str
    shapes: dict[str, tuple[int, ...]]
    strides: dict[str, tuple[int, ...]]
    layouts: dict[str, str]
    kwargs: dict[str, Any]
    distribution: str
    kind: FailureKind
    message: str
    comparator: str | None
    headroom: float | None  # worst |y - r| / allowed; > 1 fails
    max_abs_error: float | None
    worst_index: tuple[int, ...] | None
    exceeded: Count | None
    total: Count | None
    snapshot: SnapshotPath | None  # relative to the directory of results.json
    replay: str
    stderr_tail: str | None = None
    errored: bool = False  # True: the case could not be judged (see `party`), not a wrong answer
    snapshot_error: str | None = None  # why its input snapshot could not be written (the seed still replays)
    origin: str | None = None  # "corpus:<file>" for a pinned regression case; None for a fuzzed one
    output: str | None = None  # the output that failed when not the forward's: "grad of x" (backward = true)
    # SHA-256 (32 hex) of the inputs the case was judged on (fuzz/inputs.py): `replay` checks it rebuilt them
    inputs_digest: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{32}$")] | None = None
    # Who failed: "op" for a wrong answer, crash or timeout of the op; for a case that could not be judged the
    # "reference", "inputs hook", "setup" (gpuemu-ci's own preparation of the case), "naive implementation",
    # "reference's backward" or "judge". None in documents written before it was recorded.
    party: str | None = None
    # What explains a wrong answer (backends/explain.py): the one-line shape of the elements over the allowance
    # ("wrong only in the last partial tile of N=1090 (cols 1088–1089, tile 64): ..."), the error map drawn
    # beside the snapshot (results/error_map.py) or why none was drawn, and, for a Triton kernel, where its worst
    # element was stored: "stored by program (3, 0, 0) of `_softmax` (grid (64, 1, 1)), lane 17 of its block, at
    # softmax.py:42 (in _softmax); its store's mask was partial in that program" (triton_cpu/where.py), or why not.
    pattern: str | None = None
    error_map: ErrorMapPath | None = None  # relative to the directory of results.json
    error_map_note: str | None = None
    where: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_seed(self.case_seed, "case_seed")


class DimRange(Record, frozen=True):
    """The smallest and largest size of a dim among the cases that ran."""

    min: Count
    max: Count


class Coverage(Record, frozen=True):
    """What the cases of one op x dtype exercised, so a verdict says what it covered."""

    dims: dict[str, DimRange] = msgspec.field(default_factory=dict)
    size_classes: dict[str, Count] = msgspec.field(
        default_factory=dict
    )  # typical|boundary|tile|large -> cases
    tile_sizes: dict[str, tuple[int, ...]] = msgspec.field(default_factory=dict)  # dim -> sizes of tile cases
    layouts: dict[str, Count] = msgspec.field(default_factory=dict)  # layout -> inputs given it
    value_modes: dict[str, Count] = msgspec.field(default_factory=dict)  # mode -> cases
    kwargs: dict[str, tuple[Any, ...]] = msgspec.field(default_factory=dict)  # kwarg -> values that ran
    max_elements: Count | None = None  # the cap on sizes the tool chose
    capped: Count = 0  # cases whose tool-chosen sizes the cap shrank
    cap_examples: tuple[str, ...] = ()  # e.g. "N 4097 → 2049"
    skipped: tuple[str, ...] = ()  # cases not run on this machine, each with its reason
    # The declared max of each drawn dim whose size varies (plan/maxima.py): the quick suite puts each at its max
    # at least once per dtype, so `dims[name].max` below it says the cap or a constraint kept it smaller.
    declared_max: dict[str, Count] = msgspec.field(default_factory=dict)


class GradientResult(Record, frozen=True):
    """An op's gradient of one input (`backward = true`) over the cases of one dtype: the rule that judged it
    (`bound`: the family's structure bound; `baseline_relative`: k times the error of the reference's backward
    in the working precision) and its worst headroom (> 1 fails)."""

    of: str  # the input: results name the gradient "grad of <of>"
    rule: str
    worst_headroom: float | None = None
    max_abs_error: float | None = None


class DtypeResult(Record, frozen=True):
    """An op's outcome for one dtype. Skipped cases (`cases_skipped`, see `skip_reason`) ran but were not judged:
    they count neither as passed nor as failed."""

    dtype: str
    status: OpStatus
    cases_total: Count
    cases_failed: Count
    cases_errored: Count
    worst_headroom: float | None
    max_abs_error: float | None
    comparator: str | None
    worst_case: str | None = None
    coverage: Coverage | None = None
    cases_skipped: Count = 0
    skip_reason: str | None = None  # e.g. "Triton interpreter: bfloat16 unsupported"
    cases_from_corpus: Count = 0  # pinned regression cases among cases_total (gpuemu-ci corpus add)
    duration_s: float | None = None  # seconds inside the op, reference and naive calls of these cases
    gradients: tuple[GradientResult, ...] = ()  # backward = true: per gradient, sorted by input name

    @property
    def cases_judged(self) -> int:
        """The cases that ran and were judged (the skipped ones left out)."""
        return self.cases_total - self.cases_skipped


class OpResult(Record, frozen=True):
    """One `[[ops]]` entry (or a launchable `[[kernels]]` entry): its status, per-dtype rows and the recorded
    failures (the first of each op; the rest are counted in `failures_omitted`)."""

    name: str
    status: OpStatus
    family: str | None
    comparator: str | None
    line: int | None  # of the [[ops]] table in gpuemu.toml
    framework: str
    interpreter: str | None  # e.g. "triton-interpreter" when the op ran in Triton's CPU interpreter
    skip_reason: str | None
    message: str | None
    cases_total: Count
    cases_passed: Count
    cases_failed: Count
    cases_errored: Count
    dtypes: tuple[DtypeResult, ...] = ()
    failures: tuple[Failure, ...] = ()
    failures_omitted: Count = 0
    import_error: bool = False  # the op or its reference does not load: the config is wrong (exit 2)
    dtypes_not_run: tuple[str, ...] = ()  # declared dtypes this suite left out (ci.quick_dtypes, --dtype)
    cases_skipped: Count = 0  # ran but not judged (see the dtype rows' skip_reason): not passed, not failed
    # Triton kernels under the interpreter: launches run vectorised (every program at once) and one program at a
    # time, by why ("one program at a time: atomics"), over the op's cases (gpuemu_ci/triton_cpu).
    triton_launches: dict[str, Count] = msgspec.field(default_factory=dict)
    # The input precisions of the op's fp32 `tl.dot`s (tf32, tf32x3, ieee): the matmul and attention bounds
    # allow for TF32 inputs where they ran in TF32; every other family's bound assumes full fp32.
    triton_dot_precisions: tuple[DotPrecision, ...] = ()
    # Warnings of the Triton layer over the op's cases: outputs that depend on masked-off lanes Triton leaves
    # undefined, fp32 dots left at their default precision, interpreter faults worked around.
    triton_notes: tuple[str, ...] = ()
    # Where the op's seconds went (results/timings.py): clock readings, never part of a verdict or a comparison.
    timings: OpTimings | None = None

    def dtype_result(self, dtype: str) -> DtypeResult | None:
        """The row of one dtype, if it ran."""
        return next((d for d in self.dtypes if d.dtype == dtype), None)


class Summary(Record, frozen=True):
    """Totals over the ops and kernels (derived: recomputed from them, never read from a file)."""

    ops_total: int = 0
    ops_passed: int = 0
    ops_failed: int = 0
    ops_skipped: int = 0
    ops_errored: int = 0
    cases_total: int = 0
    cases_failed: int = 0
    cases_errored: int = 0
    cases_skipped: int = 0
    dtypes_skipped: int = 0  # op x dtype rows not judged at all (status skipped)
    kernels_total: int = 0
    kernels_failed: int = 0
    duration_s: float = 0.0

    @classmethod
    def of(cls, ops: tuple[OpResult, ...], kernels: tuple[KernelResult, ...], duration_s: float) -> Summary:
        """The totals over these ops and kernels."""

        def count(status: OpStatus) -> int:
            return sum(1 for op in ops if op.status is status)

        return cls(
            ops_total=len(ops),
            ops_passed=count(OpStatus.PASSED),
            ops_failed=count(OpStatus.FAILED),
            ops_skipped=count(OpStatus.SKIPPED),
            ops_errored=count(OpStatus.ERROR),
            cases_total=sum(op.cases_total for op in ops),
            cases_failed=sum(op.cases_failed for op in ops),
            cases_errored=sum(op.cases_errored for op in ops),
            cases_skipped=sum(op.cases_skipped for op in ops),
            dtypes_skipped=sum(1 for op in ops for row in op.dtypes if row.status is OpStatus.SKIPPED),
            kernels_total=len(kernels),
            kernels_failed=sum(1 for k in kernels if k.status is KernelStatus.FAILED),
            duration_s=duration_s,
        )


class ToolInfo(Record, frozen=True):
    """The tool that wrote the document."""

    name: str = "gpuemu-ci"
    version: str = ""


class ConfigInfo(Record, frozen=True):
    """The gpuemu.toml that was run: its path relative to the working directory, hash and project name."""

    path: str
    sha256: Sha256
    project: str | None = None


class GitInfo(Record, frozen=True):
    """The tested commit."""

    commit: str
    ref: str | None = None


class GpuInfo(Record, frozen=True):
    """The first visible GPU and the CUDA stack around it."""

    name: str
    compute_capability: str  # "9.0"
    count: int
    memory_bytes: int | None = None
    driver_version: str | None = None  # the NVIDIA driver, e.g. "550.54.15"
    cuda_runtime_version: str | None = None  # from CuPy, e.g. "12.4"
    cuda_driver_api_version: str | None = None  # the newest CUDA the driver supports, e.g. "12.4"
    cupy_version: str | None = None
    source: str = "nvidia-smi"  # how it was found: "nvidia-smi" | "cupy"

    @property
    def arch(self) -> str:
        """The `sm_XY` name of the compute capability."""
        return "sm_" + self.compute_capability.replace(".", "")


class Environment(Record, frozen=True):
    """Where the run happened."""

    python: str
    numpy: str
    platform: str
    executable: str
    gpu: GpuInfo | None = None


class RunInfo(Record, frozen=True):
    """The CI run that produced the document, when it ran in GitHub Actions."""

    repo: str | None = None
    repo_id: str | None = None
    run_id: str | None = None
    run_attempt: int | None = None
    pr: int | None = None
    event: str | None = None
    server_url: str | None = None
    job: str | None = None
    commit: str | None = None  # the commit the run tested (the PR head, not the merge commit)

    def url(self) -> str | None:
        """The run's page on GitHub, when the document says enough (and plausibly) to build it."""
        if not (self.server_url and self.repo and self.run_id and _REPO.fullmatch(self.repo)):
            return None
        if not self.run_id.isdigit():
            return None
        url = f"{self.server_url.rstrip('/')}/{self.repo}/actions/runs/{self.run_id}"
        return url + (f"/attempts/{self.run_attempt}" if self.run_attempt else "")


@dataclass(frozen=True)
class FailureGroup:
    """The failures of one op x dtype, worst first; `unrecorded` failed cases have no record."""

    op: OpResult
    dtype: str
    row: DtypeResult | None
    failures: tuple[Failure, ...]
    unrecorded: int

    @property
    def worst(self) -> Failure | None:
        """The worst recorded case (largest headroom), if any was recorded."""
        return self.failures[0] if self.failures else None


class ShardOp(Record, frozen=True):
    """One op of a sharded suite's plan, as the unsharded run would list it."""

    name: str
    dtypes: tuple[str, ...]  # the planned dtypes, in the order results list them
    cases: Count  # the op's planned cases in the whole suite


class ShardInfo(Record, frozen=True):
    """The part of a suite this document holds (`gpuemu-ci run --shard K/N`); `gpuemu-ci merge` puts the N
    parts back together and refuses parts of different plans."""

    index: Annotated[int, msgspec.Meta(ge=1)]
    count: Annotated[int, msgspec.Meta(ge=1)]
    plan: Sha256  # the whole suite's plan: config, seed, generator, ops, dtypes and case seeds
    cases: Count  # this shard's cases
    ops: tuple[ShardOp, ...] = ()


class Results(Record, frozen=True, kw_only=True):
    """Everything a run found: results.json."""

    schema_version: Literal["2"] = SCHEMA_VERSION
    tool: ToolInfo = msgspec.field(default_factory=ToolInfo)
    generator_version: str
    seed: Seed
    suite: str
    started_at: str
    finished_at: str
    config: ConfigInfo
    environment: Environment
    git: GitInfo | None = None
    verdict: Verdict
    exit_code: int
    cut_short: bool = False
    summary: Summary = msgspec.field(default_factory=Summary)
    ops: tuple[OpResult, ...] = ()
    kernels: tuple[KernelResult, ...] = ()
    lint: LintInfo = msgspec.field(default_factory=LintInfo)
    diff: BaselineDiff | None = None
    run: RunInfo | None = None
    notes: tuple[str, ...] = ()
    shard: ShardInfo | None = None  # set in the document of one shard; never in a merged or whole run
    # `--allow-skips` / `ci.allow_skips`: skipped ops and cases do not stop a pass ("passed with N skipped").
    skips_allowed: bool = False
    # `policies.warn_threshold`: a passing op x dtype whose worst case uses this share of its allowance warns.
    warn_threshold: Annotated[float, msgspec.Meta(gt=0, le=1)] | None = None
    mutation: MutationReport | None = None  # `gpuemu-ci mutate`: the planted bugs and the suite's score

    def __post_init__(self) -> None:
        super().__post_init__()
        check_seed(self.seed, "seed")
        if self.shard is not None and self.shard.index > self.shard.count:
            raise ValueError(f"shard {self.shard.index} of {self.shard.count} does not exist")
        if self.verdict is Verdict.PASSED and (self.exit_code != 0 or self.cut_short):
            # msgspec reports this as a validation error of the document (`$`) when one is read.
            raise ValueError("a passed verdict needs exit_code 0 and a run that was not cut short")
        summary = Summary.of(self.ops, self.kernels, self.summary.duration_s)
        msgspec.structs.force_setattr(self, "summary", summary)

    # --- what a report states ---------------------------------------------------------------------------
    @property
    def headline(self) -> Headline:
        """FAILED wins (a recorded failure counts whatever `verdict` says: a document read from a file may claim
        anything); then ERROR; a cut-short run is INCOMPLETE; a "passed" with nothing executed, or with a non-zero
        exit code, is an ERROR, never a pass."""
        failed_rows = self.summary.ops_failed or self.summary.kernels_failed
        # A kernel row recording an error-level violation failed, whatever its status says.
        failed_rows = failed_rows or any(k.errors for k in self.kernels)
        if self.verdict is Verdict.FAILED or failed_rows or (self.diff is not None and self.diff.gate_failed):
            return Headline.FAILED
        if self.verdict is Verdict.ERROR or self.summary.ops_errored:
            return Headline.ERROR
        if self.verdict is Verdict.INCOMPLETE or self.cut_short:
            return Headline.INCOMPLETE
        if not self.executed or self.exit_code != 0 or (self.skipped and not self.skips_allowed):
            return Headline.ERROR
        return Headline.PASSED

    @property
    def skipped(self) -> int:
        """Ops and cases that did not run here (see `skipped_count`)."""
        return skipped_count(self.ops)

    def near_limit(self) -> tuple[tuple[OpResult, DtypeResult, float], ...]:
        """(op, dtype row, its worst headroom or gradient headroom) of each passing row that uses at least
        `warn_threshold` of its allowance: upstream's warning "the error exceeds 80% of the tolerance"."""
        threshold = self.warn_threshold
        if threshold is None:
            return ()
        found = []
        for op in self.ops:
            for row in op.dtypes:
                if row.status is not OpStatus.PASSED:
                    continue
                worst = max(
                    [
                        h
                        for h in (row.worst_headroom, *(g.worst_headroom for g in row.gradients))
                        if h is not None
                    ],
                    default=None,
                )
                if worst is not None and worst >= threshold:
                    found.append((op, row, worst))
        return tuple(found)

    @property
    def executed(self) -> bool:
        """Whether anything was actually tested (a case was judged or a kernel was linted)."""
        judged = self.summary.cases_total - self.summary.cases_skipped
        return judged > 0 or any(k.status is KernelStatus.PASSED for k in self.kernels)

    def skipped_rows(self) -> tuple[tuple[OpResult, DtypeResult], ...]:
        """(op, dtype row) of every row with cases that ran but were not judged."""
        return tuple((op, row) for op in self.ops for row in op.dtypes if row.cases_skipped)

    @property
    def interpreted_ops(self) -> tuple[OpResult, ...]:
        """The ops that ran in Triton's CPU interpreter (every report names them)."""
        return tuple(op for op in self.ops if op.interpreter)

    @property
    def compared(self) -> BaselineDiff | None:
        """The baseline diff, when a comparison actually happened."""
        return self.diff if self.diff is not None and self.diff.status is DiffStatus.COMPARED else None

    def op(self, name: str) -> OpResult | None:
        """The result of the op of this name, if the document has one."""
        return next((op for op in self.ops if op.name == name), None)

    def kernel(self, name: str) -> KernelResult | None:
        """The result of the kernel of this name, if the document has one."""
        return next((k for k in self.kernels if k.name == name), None)

    def failure_groups(self) -> tuple[FailureGroup, ...]:
        """Judged failures grouped by op x dtype, in op order, dtypes as listed, worst case first."""
        return self._groups(errored=False)

    def errored_groups(self) -> tuple[FailureGroup, ...]:
        """Cases that could not be judged (their `party` failed), grouped the same way."""
        return self._groups(errored=True)

    def _groups(self, *, errored: bool) -> tuple[FailureGroup, ...]:
        groups: list[FailureGroup] = []
        wanted = OpStatus.ERROR if errored else OpStatus.FAILED
        for op in self.ops:
            records = [f for f in op.failures if f.errored is errored]
            rows = {row.dtype: row for row in op.dtypes}
            order = [
                row.dtype
                for row in op.dtypes
                if row.status is wanted or ((row.cases_errored if errored else row.cases_failed) > 0)
            ]
            order += sorted({f.dtype for f in records} - set(order))
            for dtype in order:
                mine = sorted((f for f in records if f.dtype == dtype), key=_severity_key)
                row = rows.get(dtype)
                counted = (row.cases_errored if errored else row.cases_failed) if row else len(mine)
                groups.append(FailureGroup(op, dtype, row, tuple(mine), max(0, counted - len(mine))))
        return tuple(groups)

    def repo_path(self, relative: str) -> str:
        """A path from the results (relative to gpuemu.toml's directory) as a repository path."""
        if relative.startswith("/"):
            return relative
        return posixpath.normpath(posixpath.join(posixpath.dirname(self.config.path), relative))

    @property
    def tested_commit(self) -> str | None:
        """The commit the run tested: the CI run's record of it, else git's."""
        if self.run is not None and self.run.commit:
            return self.run.commit
        return self.git.commit if self.git is not None else None


def _severity_key(failure: Failure) -> tuple[int, float]:
    # Worst first: the largest headroom; failures without a number (crash, raise) after those.
    return (0, -failure.headroom) if failure.headroom is not None else (1, 0.0)
