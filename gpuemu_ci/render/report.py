"""The results document as every renderer sees it: frozen dataclasses (`Report` and its parts).

`gpuemu_ci.render.parse.parse_report` builds a `Report` from a decoded results.json. Beyond the
raw fields, `Report` knows what to state (`headline`: never "passed" when nothing ran or the run
was cut short), how failures group by op x dtype, and where a path lies in the repository.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from enum import Enum

from gpuemu_ci.lint.model import KernelStatus
from gpuemu_ci.render.escape import safe_url
from gpuemu_ci.results.model import OpStatus, Verdict

_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


class Headline(str, Enum):
    """The verdict a report states. Never PASSED when nothing ran or the run was cut short."""

    PASSED = "passed"
    FAILED = "FAILED"
    ERROR = "ERROR"
    INCOMPLETE = "INCOMPLETE"


@dataclass(frozen=True)
class Failure:
    """One failing (or unjudgeable, `errored`) case with everything needed to replay it."""

    op: str
    case_id: str
    case_seed: int
    dtype: str
    kind: str
    message: str
    shapes: tuple[tuple[str, tuple[int, ...]], ...]
    strides: tuple[tuple[str, tuple[int, ...]], ...]
    layouts: tuple[tuple[str, str], ...]
    kwargs: tuple[tuple[str, str], ...]  # values as compact JSON
    distribution: str
    comparator: str | None
    headroom: float | None  # worst |y - r| / allowed; > 1 fails
    max_abs_error: float | None
    exceeded: int | None
    total: int | None
    snapshot: str | None
    replay: str
    errored: bool


@dataclass(frozen=True)
class DtypeRow:
    """An op's outcome for one dtype."""

    dtype: str
    status: OpStatus
    cases_total: int
    cases_failed: int
    cases_errored: int
    worst_headroom: float | None
    max_abs_error: float | None
    comparator: str | None


@dataclass(frozen=True)
class Op:
    """One `[[ops]]` entry: its status, per-dtype rows and the recorded failures."""

    name: str
    status: OpStatus
    line: int | None
    family: str | None
    framework: str | None
    skip_reason: str | None
    message: str | None
    cases_total: int
    cases_failed: int
    cases_errored: int
    dtypes: tuple[DtypeRow, ...]
    failures: tuple[Failure, ...]
    failures_omitted: int


@dataclass(frozen=True)
class FailureGroup:
    """The failures of one op x dtype, worst first; `unrecorded` failed cases have no record."""

    op: Op
    dtype: str
    row: DtypeRow | None
    failures: tuple[Failure, ...]
    unrecorded: int

    @property
    def worst(self) -> Failure | None:
        """The worst recorded case (largest headroom), if any was recorded."""
        return self.failures[0] if self.failures else None


@dataclass(frozen=True)
class Violation:
    """A lint check that failed (severity "error") or could not be carried out ("warning")."""

    kernel: str
    arch: str
    metric: str
    limit: str
    value: str
    severity: str
    message: str


@dataclass(frozen=True)
class CompileFailure:
    """The compiler refused the kernel source."""

    message: str
    file: str | None
    line: int | None
    arch: str | None


@dataclass(frozen=True)
class Kernel:
    """One `[[kernels]]` entry; `line` is the line of its table in gpuemu.toml."""

    name: str
    source: str
    line: int | None
    status: KernelStatus
    archs: tuple[str, ...]
    entries: tuple[tuple[str, str], ...]  # (kernel entry, arch) pairs that were measured
    violations: tuple[Violation, ...]
    error: CompileFailure | None


@dataclass(frozen=True)
class DiffReason:
    """One metric that moved since the baseline: old -> new and a sentence for a reviewer."""

    metric: str
    old: str
    new: str
    message: str


@dataclass(frozen=True)
class DiffEntry:
    """One op x dtype or kernel x arch compared with the baseline."""

    kind: str  # "op" | "kernel"
    name: str
    variant: str  # the dtype or the arch
    classification: str  # regressed | improved | unchanged | new | removed | toolchain_changed
    severity: str  # failure | warning | info
    reasons: tuple[DiffReason, ...]


@dataclass(frozen=True)
class Diff:
    """The comparison with the base branch's baseline, as the diff stage wrote it."""

    status: str  # compared | no_baseline | unreadable
    message: str
    summary_line: str
    regressions: int
    entries: tuple[DiffEntry, ...]


@dataclass(frozen=True)
class RunInfo:
    """The GitHub Actions run that produced the document, when known."""

    repo: str | None
    run_id: str | None
    run_attempt: int | None
    server_url: str | None
    job: str | None
    pr: int | None

    def url(self) -> str | None:
        """The run's page on GitHub, when the document says enough (and plausibly) to build it."""
        if not (self.server_url and self.repo and self.run_id and _REPO.fullmatch(self.repo)):
            return None
        if not self.run_id.isdigit():
            return None
        url = f"{self.server_url.rstrip('/')}/{self.repo}/actions/runs/{self.run_id}"
        return url + (f"/attempts/{self.run_attempt}" if self.run_attempt else "")


@dataclass(frozen=True)
class Counts:
    """Totals, recomputed from the ops and kernels so that no summary disagrees with the rows shown."""

    ops_total: int
    ops_passed: int
    ops_failed: int
    ops_skipped: int
    ops_errored: int
    cases_total: int
    cases_failed: int
    cases_errored: int
    kernels_total: int
    kernels_failed: int
    duration_s: float


@dataclass(frozen=True)
class Report:
    """A parsed results document (schema version 1)."""

    verdict: Verdict
    exit_code: int
    cut_short: bool
    seed: int
    suite: str
    tool_version: str
    generator_version: str
    config_path: str
    project: str | None
    commit: str | None
    gpu: str | None
    counts: Counts
    ops: tuple[Op, ...]
    kernels: tuple[Kernel, ...]
    lint_status: str
    lint_reason: str | None
    diff: Diff | None
    run: RunInfo | None
    notes: tuple[str, ...]

    @property
    def headline(self) -> Headline:
        """The verdict to state: FAILED wins; then ERROR; a cut-short run is INCOMPLETE; a "passed"
        with nothing executed is an ERROR, never a pass."""
        if self.verdict is Verdict.FAILED:
            return Headline.FAILED
        if self.verdict is Verdict.ERROR:
            return Headline.ERROR
        if self.verdict is Verdict.INCOMPLETE or self.cut_short:
            return Headline.INCOMPLETE
        if not self.executed or self.exit_code != 0:
            return Headline.ERROR
        return Headline.PASSED

    @property
    def executed(self) -> bool:
        """Whether anything was actually tested (a case ran or a kernel was linted)."""
        return self.counts.cases_total > 0 or any(k.status is KernelStatus.PASSED for k in self.kernels)

    def failure_groups(self) -> tuple[FailureGroup, ...]:
        """Judged failures grouped by op x dtype, in op order, dtypes as listed, worst case first."""
        return self._groups(errored=False)

    def errored_groups(self) -> tuple[FailureGroup, ...]:
        """Cases that could not be judged (the reference failed), grouped the same way."""
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
        return posixpath.normpath(posixpath.join(posixpath.dirname(self.config_path), relative))


@dataclass(frozen=True)
class Links:
    """Where the full report lives. Only absolute http(s) URLs are kept (`escape.safe_url`); anything
    else becomes None, and no link is shown."""

    run_url: str | None = None
    artifact_url: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "run_url", safe_url(self.run_url))
        object.__setattr__(self, "artifact_url", safe_url(self.artifact_url))

    @classmethod
    def for_report(cls, report: Report, run_url: str | None = None, artifact_url: str | None = None) -> Links:
        """The given URLs; without a run URL, the run's page derived from the document's `run` section."""
        if safe_url(run_url) is None and report.run is not None:
            run_url = report.run.url()
        return cls(run_url, artifact_url)


def _severity_key(failure: Failure) -> tuple[int, float]:
    # Worst first: the largest headroom; failures without a number (crash, raise) after those.
    return (0, -failure.headroom) if failure.headroom is not None else (1, 0.0)
