"""The results document: dataclasses for what a run found, serialised to results.json (schema version 1)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

SCHEMA_VERSION = "1"


class OpStatus(str, Enum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    ERROR = "error"


class Verdict(str, Enum):
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    INCOMPLETE = "incomplete"  # cut short by the suite timeout: never a pass


@dataclass(frozen=True)
class FailureRecord:
    case_id: str
    case_index: int | None
    case_seed: int
    dtype: str
    shapes: dict[str, list[int]]
    strides: dict[str, list[int]]
    layouts: dict[str, str]
    kwargs: dict[str, Any]
    distribution: str
    kind: str
    message: str
    comparator: str | None
    headroom: float | None
    max_abs_error: float | None
    worst_index: list[int] | None
    exceeded: int | None
    total: int | None
    snapshot: str | None
    replay: str
    stderr_tail: str | None = None
    errored: bool = False  # True: the case could not be judged (reference failed), not a wrong answer

    def to_json(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        if data["stderr_tail"] is None:
            data.pop("stderr_tail")
        return data


@dataclass(frozen=True)
class DtypeResult:
    dtype: str
    status: OpStatus
    cases_total: int
    cases_failed: int
    cases_errored: int
    worst_headroom: float | None
    max_abs_error: float | None
    comparator: str | None
    worst_case: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["status"] = self.status.value
        return data


@dataclass(frozen=True)
class OpResult:
    name: str
    status: OpStatus
    family: str | None
    comparator: str | None
    line: int | None
    framework: str
    interpreter: str | None
    skip_reason: str | None
    message: str | None
    cases_total: int
    cases_passed: int
    cases_failed: int
    cases_errored: int
    dtypes: tuple[DtypeResult, ...] = ()
    failures: tuple[FailureRecord, ...] = ()
    failures_omitted: int = 0
    import_error: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status.value,
            "family": self.family,
            "comparator": self.comparator,
            "line": self.line,
            "framework": self.framework,
            "interpreter": self.interpreter,
            "skip_reason": self.skip_reason,
            "message": self.message,
            "cases_total": self.cases_total,
            "cases_passed": self.cases_passed,
            "cases_failed": self.cases_failed,
            "cases_errored": self.cases_errored,
            "dtypes": [d.to_json() for d in self.dtypes],
            "failures": [f.to_json() for f in self.failures],
            "failures_omitted": self.failures_omitted,
        }


@dataclass(frozen=True)
class Summary:
    ops_total: int
    ops_passed: int
    ops_failed: int
    ops_skipped: int
    ops_errored: int
    cases_total: int
    cases_failed: int
    cases_errored: int
    duration_s: float
    kernels_total: int = 0
    kernels_failed: int = 0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class RunDocument:
    """Everything results.json holds; `kernels`, `lint`, `diff` and `run` are already JSON-shaped."""

    tool_version: str
    generator_version: str
    seed: int
    suite: str
    started_at: str
    finished_at: str
    config: dict[str, Any]
    environment: dict[str, Any]
    git: dict[str, Any] | None
    verdict: Verdict
    exit_code: int
    cut_short: bool
    summary: Summary
    ops: tuple[OpResult, ...]
    kernels: tuple[dict[str, Any], ...] = ()
    lint: dict[str, Any] = field(default_factory=lambda: {"status": "no_kernels", "toolchain": None})
    diff: dict[str, Any] | None = None
    run: dict[str, Any] | None = None
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "gpuemu-ci", "version": self.tool_version},
            "generator_version": self.generator_version,
            "seed": self.seed,
            "suite": self.suite,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "config": self.config,
            "environment": self.environment,
            "git": self.git,
            "verdict": self.verdict.value,
            "exit_code": self.exit_code,
            "cut_short": self.cut_short,
            "summary": self.summary.to_json(),
            "ops": [op.to_json() for op in self.ops],
            "kernels": list(self.kernels),
            "lint": self.lint,
            "diff": self.diff,
            "run": self.run,
            "notes": list(self.notes),
        }
