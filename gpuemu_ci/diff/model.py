"""What a baseline diff found: one classified entry per op x dtype and kernel x arch, serialised into the
`diff` section of results.json so every renderer shows the same classification."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

# A metric value as it appears in a reason: a number, a version or status string, or absent.
ReasonValue = int | float | str | bool | None


class DiffStatus(str, Enum):
    """Whether a comparison happened. Anything but COMPARED leaves the run's own verdict in charge."""

    COMPARED = "compared"
    NO_BASELINE = "no_baseline"  # the file does not exist (first run, expired artifact)
    UNREADABLE = "unreadable"  # it exists but is not a baseline this version can read


class Classification(str, Enum):
    """How one op x dtype or kernel x arch changed since the baseline."""

    REGRESSED = "regressed"
    IMPROVED = "improved"
    UNCHANGED = "unchanged"
    NEW = "new"
    REMOVED = "removed"
    # The measuring instrument changed (nvcc/ptxas version, compile flags, fuzz generator version,
    # comparator): the numbers are shown but a change is not attributed to the code.
    TOOLCHAIN_CHANGED = "toolchain_changed"


class Severity(str, Enum):
    """FAILURE counts as a regression (and fails the gate when fail_on_regression is on); WARNING is shown
    prominently and never fails; INFO is context."""

    FAILURE = "failure"
    WARNING = "warning"
    INFO = "info"


SEVERITY_ORDER = {Severity.FAILURE: 0, Severity.WARNING: 1, Severity.INFO: 2}


# The dtype or arch of a row that stands for a whole op or kernel (skipped, not loadable, not compiled).
ALL = "all"


class EntryKind(str, Enum):
    OP = "op"
    KERNEL = "kernel"


@dataclass(frozen=True)
class Reason:
    """One metric that moved (or a fact about it): old -> new and a sentence a reviewer can read."""

    metric: str
    old: ReasonValue
    new: ReasonValue
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "old": self.old, "new": self.new, "message": self.message}


@dataclass(frozen=True)
class DiffEntry:
    """One op x dtype (kind OP, `dtype` set) or kernel entry x arch (kind KERNEL, `arch` set).

    For kernels `name` is the [[kernels]] name, or "name/entry" when the source holds several entries
    (or one named differently); `config_name` and `entry` keep the two parts apart."""

    kind: EntryKind
    name: str
    classification: Classification
    severity: Severity
    reasons: tuple[Reason, ...] = ()
    dtype: str | None = None
    arch: str | None = None
    config_name: str | None = None
    entry: str | None = None

    @property
    def label(self) -> str:
        """ "matmul [float32]" or "gelu [sm_80]"."""
        detail = self.dtype if self.kind is EntryKind.OP else self.arch
        return f"{self.name} [{detail}]" if detail else self.name

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind.value, "name": self.name}
        if self.kind is EntryKind.OP:
            data["dtype"] = self.dtype or ALL
        else:
            data["arch"] = self.arch or ALL
            data["config_name"] = self.config_name
            data["entry"] = self.entry
        data["classification"] = self.classification.value
        data["severity"] = self.severity.value
        data["reasons"] = [r.to_json() for r in self.reasons]
        return data


@dataclass(frozen=True)
class BaselineInfo:
    """Where the baseline came from, as recorded in it."""

    source: str  # "results" (a results.json) or "baseline" (a baseline.json)
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
    ci: dict[str, Any] | None = None  # the GitHub run that produced it (repo, run_id, ...), when known
    provenance: dict[str, Any] | None = None  # how the caller found it (e.g. the Action's artifact match)

    def to_json(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        if data["ci"] is None:
            data.pop("ci")
        if data["provenance"] is None:
            data.pop("provenance")
        return data


@dataclass(frozen=True)
class BaselineDiff:
    """The whole comparison. `fail_on_regression` is the effective gate setting (policy or flag)."""

    status: DiffStatus
    message: str
    baseline: BaselineInfo | None = None
    entries: tuple[DiffEntry, ...] = ()
    notes: tuple[Reason, ...] = ()  # run-level changes: config, seed, suite, tool and generator versions
    fail_on_regression: bool = True

    @property
    def regressions(self) -> int:
        return sum(1 for e in self.entries if e.severity is Severity.FAILURE)

    @property
    def warnings(self) -> int:
        return sum(1 for e in self.entries if e.severity is Severity.WARNING)

    @property
    def gate_failed(self) -> bool:
        """True when a regression fails the gate."""
        return self.status is DiffStatus.COMPARED and self.fail_on_regression and self.regressions > 0

    def count(self, classification: Classification) -> int:
        return sum(1 for e in self.entries if e.classification is classification)

    @property
    def summary_line(self) -> str:
        """One line for logs and comment headers."""
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

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "message": self.message,
            "baseline": None if self.baseline is None else self.baseline.to_json(),
            "summary_line": self.summary_line,
            "regressions": self.regressions,
            "warnings": self.warnings,
            "counts": {c.value: self.count(c) for c in Classification},
            "gate": {"fail_on_regression": self.fail_on_regression, "failed": self.gate_failed},
            "notes": [n.to_json() for n in self.notes],
            "entries": [e.to_json() for e in self.entries],
        }


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _where(info: BaselineInfo) -> str:
    if info.commit:
        text = info.commit[:12]
        if info.ref:
            text += f" ({info.ref.removeprefix('refs/heads/')})"
        return text
    return info.path
