"""Parsing a results document (version 1) into a `Report`, checking every field a renderer reads.

A results.json handed to `gpuemu-ci render` may come from a fork's artifact, so it is untrusted:
`parse_report` checks the type of each field it reads and raises a `UsageError` (exit 2) naming
the field (``ops[3].failures[0].case_seed must be an integer``) instead of failing deep inside a
template. Fields no renderer needs are not read. Validating the whole document against the JSON
Schema is `gpuemu_ci.results.schema.validate_results`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from gpuemu_ci.errors import UsageError
from gpuemu_ci.lint.model import KernelStatus
from gpuemu_ci.render.report import (
    CompileFailure,
    Counts,
    Diff,
    DiffEntry,
    DiffReason,
    DtypeRow,
    Failure,
    Kernel,
    Op,
    Report,
    RunInfo,
    Violation,
)
from gpuemu_ci.results.model import SCHEMA_VERSION, OpStatus, Verdict

T = TypeVar("T")
_MISSING: Any = object()


class _Bad(UsageError):
    """A field is missing or has the wrong type; `parse_report` names the document."""


class _Fields:
    """Typed access to one JSON object, naming the path of a bad field in the error."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, Mapping):
            raise _Bad(f"{where or 'the document'} must be an object")
        self.data = data
        self.where = where

    def _path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def _get(self, key: str, check: Callable[[Any], bool], what: str, default: Any) -> Any:
        value = self.data.get(key)
        if value is None:
            if default is _MISSING:
                raise _Bad(f"{self._path(key)} is missing")
            return default
        if not check(value):
            raise _Bad(f"{self._path(key)} must be {what}")
        return value

    def string(self, key: str, default: Any = _MISSING) -> Any:
        """A string field."""
        return self._get(key, lambda v: isinstance(v, str), "a string", default)

    def integer(self, key: str, default: Any = _MISSING) -> Any:
        """An integer field (not a bool)."""
        return self._get(key, _is_int, "an integer", default)

    def number(self, key: str, default: Any = _MISSING) -> Any:
        """An int or float field, as a float."""
        value = self._get(key, lambda v: _is_int(v) or isinstance(v, float), "a number", default)
        return float(value) if value is not None else None

    def flag(self, key: str, default: Any = _MISSING) -> Any:
        """A true/false field."""
        return self._get(key, lambda v: isinstance(v, bool), "true or false", default)

    def id(self, key: str) -> str | None:
        """A GitHub id, an integer or a digit string, as text."""
        value = self._get(key, lambda v: _is_int(v) or isinstance(v, str), "an id", None)
        return None if value is None else str(value)

    def text(self, key: str) -> str:
        """Any scalar shown as text (a lint limit may be a number or a pattern)."""
        value = self.data.get(key)
        return "" if value is None else value if isinstance(value, str) else json.dumps(value)

    def obj(self, key: str, default: Any = _MISSING) -> Any:
        """A nested object, as `_Fields` (or ``default`` when absent)."""
        value = self._get(key, lambda v: isinstance(v, Mapping), "an object", default)
        return value if value is default else _Fields(value, self._path(key))

    def items(self, key: str, parse: Callable[[_Fields], T]) -> tuple[T, ...]:
        """A list of objects, each parsed with ``parse``."""
        values = self._get(key, lambda v: isinstance(v, list), "a list", [])
        return tuple(parse(_Fields(v, f"{self._path(key)}[{i}]")) for i, v in enumerate(values))

    def dims(self, key: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """Input name -> list of ints (shapes, strides)."""
        mapping = self._get(key, lambda v: isinstance(v, Mapping), "an object", {})
        out = []
        for name, dims in mapping.items():
            if not isinstance(dims, list) or not all(_is_int(d) for d in dims):
                raise _Bad(f"{self._path(key)}.{name} must be a list of integers")
            out.append((str(name), tuple(dims)))
        return tuple(out)

    def strings(self, key: str) -> tuple[tuple[str, str], ...]:
        """Name -> value as text (layouts; kwargs as compact JSON)."""
        mapping = self._get(key, lambda v: isinstance(v, Mapping), "an object", {})
        return tuple(
            (str(k), v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str))
            for k, v in mapping.items()
        )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _enum(enum: type[Any], f: _Fields, key: str) -> Any:
    value = f.string(key)
    try:
        return enum(value)
    except ValueError:
        allowed = ", ".join(member.value for member in enum)
        raise _Bad(f"{f._path(key)} is {value!r}, not one of: {allowed}") from None


def _failure(op: str) -> Callable[[_Fields], Failure]:
    def parse(f: _Fields) -> Failure:
        return Failure(
            op=op,
            case_id=f.string("case_id", ""),
            case_seed=f.integer("case_seed"),
            dtype=f.string("dtype"),
            kind=f.string("kind"),
            message=f.string("message", ""),
            shapes=f.dims("shapes"),
            strides=f.dims("strides"),
            layouts=f.strings("layouts"),
            kwargs=f.strings("kwargs"),
            distribution=f.string("distribution", ""),
            comparator=f.string("comparator", None),
            headroom=f.number("headroom", None),
            max_abs_error=f.number("max_abs_error", None),
            exceeded=f.integer("exceeded", None),
            total=f.integer("total", None),
            snapshot=f.string("snapshot", None),
            replay=f.string("replay", ""),
            errored=f.flag("errored", False),
        )

    return parse


def _dtype_row(f: _Fields) -> DtypeRow:
    return DtypeRow(
        dtype=f.string("dtype"),
        status=_enum(OpStatus, f, "status"),
        cases_total=f.integer("cases_total", 0),
        cases_failed=f.integer("cases_failed", 0),
        cases_errored=f.integer("cases_errored", 0),
        worst_headroom=f.number("worst_headroom", None),
        max_abs_error=f.number("max_abs_error", None),
        comparator=f.string("comparator", None),
    )


def _op(f: _Fields) -> Op:
    name = f.string("name")
    return Op(
        name=name,
        status=_enum(OpStatus, f, "status"),
        line=f.integer("line", None),
        family=f.string("family", None),
        framework=f.string("framework", None),
        skip_reason=f.string("skip_reason", None),
        message=f.string("message", None),
        cases_total=f.integer("cases_total", 0),
        cases_failed=f.integer("cases_failed", 0),
        cases_errored=f.integer("cases_errored", 0),
        dtypes=f.items("dtypes", _dtype_row),
        failures=f.items("failures", _failure(name)),
        failures_omitted=f.integer("failures_omitted", 0),
    )


def _violation(f: _Fields) -> Violation:
    return Violation(
        kernel=f.string("kernel", ""),
        arch=f.string("arch", ""),
        metric=f.string("metric"),
        limit=f.text("limit"),
        value=f.text("value"),
        severity=f.string("severity", "error"),
        message=f.string("message", ""),
    )


def _kernel(f: _Fields) -> Kernel:
    error = f.obj("error", None)
    entries = f.items("entries", lambda e: (e.string("kernel", ""), e.string("arch", "")))
    return Kernel(
        name=f.string("name"),
        source=f.string("source", ""),
        line=f.integer("line", None),
        status=_enum(KernelStatus, f, "status"),
        archs=tuple(str(a) for a in f._get("archs", lambda v: isinstance(v, list), "a list", [])),
        entries=entries,
        violations=f.items("violations", _violation),
        error=None
        if error is None
        else CompileFailure(
            message=error.string("message", ""),
            file=error.string("file", None),
            line=error.integer("line", None),
            arch=error.string("arch", None),
        ),
    )


def _diff(f: _Fields) -> Diff:
    def entry(e: _Fields) -> DiffEntry:
        kind = e.string("kind")
        return DiffEntry(
            kind=kind,
            name=e.string("name"),
            variant=e.string("dtype" if kind == "op" else "arch", ""),
            classification=e.string("classification"),
            severity=e.string("severity", "info"),
            reasons=e.items(
                "reasons",
                lambda r: DiffReason(
                    r.string("metric", ""), r.text("old"), r.text("new"), r.string("message", "")
                ),
            ),
        )

    return Diff(
        status=f.string("status"),
        message=f.string("message", ""),
        summary_line=f.string("summary_line", ""),
        regressions=f.integer("regressions", 0),
        entries=f.items("entries", entry),
    )


def _run(f: _Fields) -> RunInfo:
    return RunInfo(
        repo=f.string("repo", None),
        run_id=f.id("run_id"),
        run_attempt=f.integer("run_attempt", None),
        server_url=f.string("server_url", None),
        job=f.string("job", None),
        pr=f.integer("pr", None),
    )


def _counts(f: _Fields, ops: tuple[Op, ...], kernels: tuple[Kernel, ...]) -> Counts:
    def count(status: OpStatus) -> int:
        return sum(1 for op in ops if op.status is status)

    # The counts are recomputed from the ops, so that a summary cannot disagree with the rows shown.
    return Counts(
        ops_total=len(ops),
        ops_passed=count(OpStatus.PASSED),
        ops_failed=count(OpStatus.FAILED),
        ops_skipped=count(OpStatus.SKIPPED),
        ops_errored=count(OpStatus.ERROR),
        cases_total=sum(op.cases_total for op in ops),
        cases_failed=sum(op.cases_failed for op in ops),
        cases_errored=sum(op.cases_errored for op in ops),
        kernels_total=len(kernels),
        kernels_failed=sum(1 for k in kernels if k.status is KernelStatus.FAILED),
        duration_s=f.number("duration_s", 0.0),
    )


def parse_report(document: Any, *, source: str = "the results document") -> Report:
    """The `Report` of a decoded results.json; a UsageError naming ``source`` and the bad field."""
    try:
        return _parse(document, source)
    except _Bad as exc:
        raise UsageError(f"{source} is not a valid gpuemu-ci results document: {exc.message}") from None


def _parse(document: Any, source: str) -> Report:
    f = _Fields(document, "")
    version = document.get("schema_version") if isinstance(document, Mapping) else None
    if str(version) != SCHEMA_VERSION:
        raise UsageError(
            f"{source} has results schema version {version!r}; this gpuemu-ci reads version {SCHEMA_VERSION}"
        )
    ops = f.items("ops", _op)
    kernels = f.items("kernels", _kernel)
    config = f.obj("config")
    tool = f.obj("tool", None)
    environment = f.obj("environment", None)
    gpu = environment.obj("gpu", None) if environment is not None else None
    git = f.obj("git", None)
    lint = f.obj("lint", None)
    diff = f.obj("diff", None)
    run = f.obj("run", None)
    notes = f._get(
        "notes", lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v), "a list of strings", []
    )
    return Report(
        verdict=_enum(Verdict, f, "verdict"),
        exit_code=f.integer("exit_code"),
        cut_short=f.flag("cut_short", False),
        seed=f.integer("seed"),
        suite=f.string("suite", ""),
        tool_version=tool.string("version", "") if tool else "",
        generator_version=f.string("generator_version", ""),
        config_path=config.string("path"),
        project=config.string("project", None),
        commit=git.string("commit", None) if git else None,
        gpu=gpu.string("name", None) if gpu else None,
        counts=_counts(f.obj("summary", _Fields({}, "summary")), ops, kernels),
        ops=ops,
        kernels=kernels,
        lint_status=lint.string("status", "no_kernels") if lint else "no_kernels",
        lint_reason=lint.string("reason", None) if lint else None,
        diff=_diff(diff) if diff else None,
        run=_run(run) if run else None,
        notes=tuple(notes),
    )
