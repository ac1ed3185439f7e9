"""Baseline files: trim a results.json into a baseline.json, and read either back as a Snapshot.

A baseline keeps what a later run is compared on: per op x dtype status, worst headroom and case counts;
per kernel x arch resource metrics and toolchain identity; the seed, suite, config hash, tool and
generator versions and git commit. Failure records, snapshots and opcode histograms are dropped."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuemu_ci.diff import fields as f
from gpuemu_ci.diff.model import DiffStatus
from gpuemu_ci.diff.snapshot import BASELINE_VERSION, Snapshot, parse_snapshot
from gpuemu_ci.errors import UsageError
from gpuemu_ci.results.model import SCHEMA_VERSION

BASELINE_KIND = "gpuemu-ci baseline"


class BaselineError(UsageError):
    """A baseline (or a document to compare) cannot be used. `status` says whether it is missing or bad."""

    def __init__(self, role: str, detail: str, *, status: DiffStatus = DiffStatus.UNREADABLE) -> None:
        super().__init__(f"{role} {detail}")
        self.status = status
        self.detail = detail  # the message without the role ("x.json does not exist")


def create_baseline(results: dict[str, Any], *, created_at: str | None = None) -> dict[str, Any]:
    """A results document -> a baseline document (JSON-shaped). A baseline document is returned as is
    after checking it. Raises fields.FormatError when the input is neither."""
    doc = f.table(results, "")
    if "baseline_version" in doc:
        parse_snapshot(doc)
        return doc
    version = f.string(doc, "schema_version", "", required=True)
    if version != SCHEMA_VERSION:
        raise f.FormatError(
            "schema_version", f"is {version!r}; this gpuemu-ci reads results version {SCHEMA_VERSION!r}"
        )
    tool = f.optional_table(doc, "tool", "") or {}
    config = f.optional_table(doc, "config", "") or {}
    git = f.optional_table(doc, "git", "")
    lint = f.optional_table(doc, "lint", "") or {}
    return {
        "baseline_version": BASELINE_VERSION,
        "kind": BASELINE_KIND,
        "created_at": created_at or _now(),
        "tool": {"name": "gpuemu-ci", "version": f.string(tool, "version", "tool")},
        "generator_version": f.string(doc, "generator_version", ""),
        "results_schema_version": version,
        "run": {
            "seed": f.integer(doc, "seed", ""),
            "suite": f.string(doc, "suite", ""),
            "started_at": f.string(doc, "started_at", ""),
            "finished_at": f.string(doc, "finished_at", ""),
            "verdict": f.string(doc, "verdict", ""),
            "exit_code": f.integer(doc, "exit_code", ""),
            "cut_short": f.flag(doc, "cut_short", ""),
        },
        "config": {
            "path": f.string(config, "path", "config"),
            "sha256": f.string(config, "sha256", "config"),
            "project": f.string(config, "project", "config"),
        },
        "git": None
        if git is None
        else {"commit": f.string(git, "commit", "git"), "ref": f.string(git, "ref", "git")},
        "ci": f.optional_table(doc, "run", ""),
        "toolchain": f.optional_table(lint, "toolchain", "lint"),
        "lint_status": f.string(lint, "status", "lint"),
        "ops": [_op(f.table(op, where), where) for where, op in f.items(doc, "ops", "")],
        "kernels": [
            _kernel(f.table(k, where), where) for where, k in f.items(doc, "kernels", "", required=False)
        ],
    }


def _op(op: dict[str, Any], where: str) -> dict[str, Any]:
    dtypes = []
    for path, d in f.items(op, "dtypes", where, required=False):
        d = f.table(d, path)
        dtypes.append(
            {
                "dtype": f.string(d, "dtype", path, required=True),
                "status": f.string(d, "status", path, required=True),
                "cases_total": f.integer(d, "cases_total", path),
                "cases_failed": f.integer(d, "cases_failed", path),
                "cases_errored": f.integer(d, "cases_errored", path),
                "worst_headroom": f.number(d, "worst_headroom", path),
                "max_abs_error": f.number(d, "max_abs_error", path),
                "comparator": f.string(d, "comparator", path),
                "worst_case": f.string(d, "worst_case", path),
            }
        )
    return {
        "name": f.string(op, "name", where, required=True),
        "status": f.string(op, "status", where, required=True),
        "comparator": f.string(op, "comparator", where),
        "skip_reason": f.string(op, "skip_reason", where),
        "message": f.string(op, "message", where),
        "cases_total": f.integer(op, "cases_total", where),
        "cases_failed": f.integer(op, "cases_failed", where),
        "cases_errored": f.integer(op, "cases_errored", where),
        "dtypes": dtypes,
    }


def _kernel(k: dict[str, Any], where: str) -> dict[str, Any]:
    error = k.get("error")
    if isinstance(error, dict):
        location = ":".join(str(p) for p in (error.get("file"), error.get("line")) if p)
        message = f.string(error, "message", f"{where}.error") or "does not compile"
        error = f"{location}: {message}" if location else message
    elif error is not None and not isinstance(error, str):
        raise f.FormatError(f"{where}.error", "expected an object or a string")
    violations = []
    for path, v in f.items(k, "violations", where, required=False):
        v = f.table(v, path)
        violations.append(
            {key: f.string(v, key, path) for key in ("kernel", "arch", "metric", "severity", "message")}
        )
    return {
        "name": f.string(k, "name", where, required=True),
        "source": f.string(k, "source", where),
        "source_sha256": f.string(k, "source_sha256", where),
        "status": f.string(k, "status", where, required=True),
        "archs": list(f.string_list(k, "archs", where)),
        "error": error,
        "violations": violations,
        "entries": [
            _entry(f.table(e, path), path) for path, e in f.items(k, "entries", where, required=False)
        ],
    }


def _entry(e: dict[str, Any], where: str) -> dict[str, Any]:
    stores, loads = f.integer(e, "spill_stores", where), f.integer(e, "spill_loads", where)
    registers = f.integer(e, "registers", where)
    shared = f.integer(e, "shared_memory", where)
    if shared is None and registers is not None:
        shared = 0  # ptxas prints `N bytes smem` only when N > 0; a parsed `Used` line without it means 0
    tool = f.optional_table(e, "toolchain", where) or {}
    return {
        "kernel": f.string(e, "kernel", where, required=True),
        "arch": f.string(e, "arch", where, required=True),
        "registers": registers,
        "spills": None if stores is None or loads is None else stores + loads,
        "spill_stores": stores,
        "spill_loads": loads,
        "stack_frame": f.integer(e, "stack_frame", where),
        "local_memory": f.integer(e, "local_memory", where),
        "shared_memory": shared,
        "ptx_instructions_total": f.count_total(e, "ptx_instructions", where),
        "sass_instructions_total": f.count_total(e, "sass_instructions", where),
        "toolchain": {
            "nvcc": f.string(tool, "nvcc", f"{where}.toolchain"),
            "ptxas": f.string(tool, "ptxas", f"{where}.toolchain"),
            "flags": list(f.string_list(tool, "flags", f"{where}.toolchain")),
        },
    }


def snapshot_of(document: dict[str, Any]) -> tuple[Snapshot, str]:
    """(Snapshot, "baseline" | "results") of an in-memory document. Raises fields.FormatError."""
    if isinstance(document, dict) and "baseline_version" in document:
        return parse_snapshot(create_baseline(document)), "baseline"
    # A results.json used directly: it was "created" when its run finished.
    finished = document.get("finished_at") if isinstance(document, dict) else None
    created = finished if isinstance(finished, str) else None
    return parse_snapshot(create_baseline(document, created_at=created)), "results"


def read_document(path: Path, role: str = "baseline") -> dict[str, Any]:
    """The JSON object in `path`; a BaselineError with status NO_BASELINE when the file does not exist,
    UNREADABLE for anything else that stops it being read."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BaselineError(role, f"{path} does not exist", status=DiffStatus.NO_BASELINE) from None
    except IsADirectoryError:
        raise BaselineError(role, f"{path} is a directory, not a results.json or baseline.json") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BaselineError(role, f"{path} cannot be read: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BaselineError(
            role, f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
        ) from None
    if not isinstance(data, dict) or not ("baseline_version" in data or "schema_version" in data):
        raise BaselineError(
            role,
            f"{path} is not a gpuemu-ci results.json or baseline.json "
            "(no schema_version or baseline_version)",
        )
    return data


def load_snapshot(path: Path, role: str = "baseline") -> tuple[Snapshot, str]:
    """Reads a results.json or baseline.json from disk. Raises BaselineError."""
    data = read_document(path, role)
    try:
        return snapshot_of(data)
    except f.FormatError as exc:
        raise BaselineError(role, f"{path} is not a usable gpuemu-ci document: {exc}") from None


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
