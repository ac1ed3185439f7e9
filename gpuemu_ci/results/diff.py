"""The `diff` part of results.json: what the comparison with the base branch's baseline found, one classified
entry per op x dtype and kernel entry x arch, so that every renderer shows the same classification.

The counts and the summary line are derived from the entries when the record is built (also when it is
read from a file), so they can never disagree with the entries shown."""

from __future__ import annotations

from enum import StrEnum

import msgspec

from gpuemu_ci.results.base import SEVERITY_ORDER, Record, Severity

# A metric value as it appears in a reason: a number, a version or status string, or absent.
ReasonValue = int | float | str | bool | None

# The dtype or arch of a row that stands for a whole op or kernel (skipped, not loadable, not compiled).
ALL = "all"


class DiffStatus(StrEnum):
    """Whether a comparison happened. Anything but COMPARED leaves the run's own verdict in charge."""

    COMPARED = "compared"
    NO_BASELINE = "no_baseline"  # the file does not exist (first run, expired artifact)
    UNREADABLE = "unreadable"  # it exists but is not a baseline this version can read


class Classification(StrEnum):
    """How one op x dtype or kernel x arch changed since the baseline."""

    REGRESSED = "regressed"
    IMPROVED = "improved"
    UNCHANGED = "unchanged"
    NEW = "new"
    REMOVED = "removed"
    # The measuring instrument changed (nvcc/ptxas version, compile flags, fuzz generator version,
    # comparator): the numbers are shown but a change is not attributed to the code.
    TOOLCHAIN_CHANGED = "toolchain_changed"


class EntryKind(StrEnum):
    """What a diff entry compares: an op or a kernel."""

    OP = "op"
    KERNEL = "kernel"


class Reason(Record, frozen=True):
    """One metric that moved (or a fact about it): old -> new and a sentence a reviewer can read."""

    metric: str
    old: ReasonValue
    new: ReasonValue
    message: str


class DiffEntry(Record, frozen=True):
    """One op x dtype (kind OP) or kernel entry x arch (kind KERNEL); `variant` is the dtype or the arch.

    For kernels `name` is the [[kernels]] name, or "name/entry" when the source holds several entries
    (or one named differently); `config_name` and `entry` keep the two parts apart."""

    kind: EntryKind
    name: str
    variant: str  # the dtype or the arch; ALL for a row that stands for the whole op or kernel
    classification: Classification
    severity: Severity
    reasons: tuple[Reason, ...] = ()
    config_name: str | None = None
    entry: str | None = None

    @property
    def label(self) -> str:
        """ "matmul [float32]" or "gelu [sm_80]"."""
        return f"{self.name} [{self.variant}]"


class BaselineProvenance(Record, frozen=True):
    """How the caller found the baseline: a file given by the user, or the Action's artifact lookup."""

    source: str  # "input" | "artifact" | "file"
    path: str | None = None
    match: str | None = None  # which artifact matched (the Action's lookup), in words
    reason: str | None = None
    run_id: int | None = None
    commit: str | None = None


class BaselineInfo(Record, frozen=True):
    """Where the baseline came from, as recorded in it."""

    path: str  # as the user gave it
    commit: str | None
    ref: str | None
    created_at: str | None
    tool_version: str | None
    generator_version: str | None
    config_sha256: str | None
    seed: int | None
    suite: str | None
    verdict: str | None
    cut_short: bool
    provenance: BaselineProvenance | None = None


class BaselineDiff(Record, frozen=True):
    """The whole comparison. `fail_on_regression` is the effective gate setting (policy or flag)."""

    status: DiffStatus
    message: str
    baseline: BaselineInfo | None = None
    fail_on_regression: bool = True
    entries: tuple[DiffEntry, ...] = ()
    notes: tuple[Reason, ...] = ()  # run-level changes: config, seed, suite, tool and generator versions
    # Derived from the fields above whenever the record is built or read (never trusted from a file).
    regressions: int = 0
    warnings: int = 0
    counts: dict[Classification, int] = msgspec.field(default_factory=dict)
    gate_failed: bool = False
    summary_line: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        regressions = sum(1 for e in self.entries if e.severity is Severity.ERROR)
        derived = {
            "regressions": regressions,
            "warnings": sum(1 for e in self.entries if e.severity is Severity.WARNING),
            "counts": {c: sum(1 for e in self.entries if e.classification is c) for c in Classification},
            "gate_failed": self.status is DiffStatus.COMPARED and self.fail_on_regression and regressions > 0,
        }
        for name, value in derived.items():
            msgspec.structs.force_setattr(self, name, value)
        msgspec.structs.force_setattr(self, "summary_line", self._summary_line())
        ordered = tuple(sorted(self.entries, key=lambda e: SEVERITY_ORDER[e.severity]))  # stable
        msgspec.structs.force_setattr(self, "entries", ordered)

    def count(self, classification: Classification) -> int:
        """How many entries have this classification."""
        return self.counts.get(classification, 0)

    @property
    def compared(self) -> bool:
        """Whether a baseline was compared at all."""
        return self.status is DiffStatus.COMPARED

    def changed(self) -> tuple[DiffEntry, ...]:
        """Every entry but the unchanged ones, failures first."""
        return tuple(e for e in self.entries if e.classification is not Classification.UNCHANGED)

    def _summary_line(self) -> str:
        if self.status is not DiffStatus.COMPARED:
            return self.message
        parts = [_plural(self.regressions, "regression") if self.regressions else "no regressions"]
        if self.warnings:
            parts.append(_plural(self.warnings, "warning"))
        for classification in (Classification.IMPROVED, Classification.NEW, Classification.REMOVED):
            if n := self.count(classification):
                parts.append(f"{n} {classification.value}")
        if n := self.count(Classification.TOOLCHAIN_CHANGED):
            parts.append(f"{n} toolchain changed")
        parts.append(f"{self.count(Classification.UNCHANGED)} unchanged")
        line = ", ".join(parts)
        if self.baseline is not None:
            line += f" vs baseline {_where(self.baseline)}"
        if self.regressions and not self.fail_on_regression:
            line += " (not failing the gate: fail_on_regression is off)"
        return line


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _where(info: BaselineInfo) -> str:
    if info.commit:
        text = info.commit[:12]
        if info.ref:
            text += f" ({info.ref.removeprefix('refs/heads/')})"
        return text
    return info.path
