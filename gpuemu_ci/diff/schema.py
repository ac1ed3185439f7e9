"""JSON Schema (2020-12) of the `diff` section of results.json, for the results schema to embed and for
renderers to rely on. Keep in step with model.BaselineDiff.to_json()."""

from __future__ import annotations

from typing import Any

from gpuemu_ci.diff.model import Classification, DiffStatus, EntryKind, Severity

_VALUE = {"type": ["number", "string", "boolean", "null"]}
_STRING_OR_NULL = {"type": ["string", "null"]}

REASON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["metric", "old", "new", "message"],
    "additionalProperties": False,
    "properties": {"metric": {"type": "string"}, "old": _VALUE, "new": _VALUE, "message": {"type": "string"}},
}

ENTRY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["kind", "name", "classification", "severity", "reasons"],
    "additionalProperties": False,
    "properties": {
        "kind": {"enum": [k.value for k in EntryKind]},
        "name": {"type": "string"},
        "dtype": {"type": "string", "minLength": 1},  # "all" for a row that stands for the whole op
        "arch": {"type": "string", "minLength": 1},
        "config_name": _STRING_OR_NULL,
        "entry": _STRING_OR_NULL,
        "classification": {"enum": [c.value for c in Classification]},
        "severity": {"enum": [s.value for s in Severity]},
        "reasons": {"type": "array", "items": REASON_SCHEMA},
    },
    "allOf": [
        {"if": {"properties": {"kind": {"const": "op"}}}, "then": {"required": ["dtype"]}},
        {"if": {"properties": {"kind": {"const": "kernel"}}}, "then": {"required": ["arch"]}},
    ],
}

BASELINE_INFO_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": [
        "source",
        "path",
        "commit",
        "created_at",
        "tool_version",
        "generator_version",
        "config_sha256",
    ],
    "properties": {
        "source": {"enum": ["results", "baseline"]},
        "path": {"type": "string"},
        "commit": _STRING_OR_NULL,
        "ref": _STRING_OR_NULL,
        "created_at": _STRING_OR_NULL,
        "tool_version": _STRING_OR_NULL,
        "generator_version": _STRING_OR_NULL,
        "config_sha256": _STRING_OR_NULL,
        "seed": {"type": ["integer", "null"]},
        "suite": _STRING_OR_NULL,
        "verdict": _STRING_OR_NULL,
        "cut_short": {"type": "boolean"},
        "ci": {"type": "object"},
        "provenance": {"type": "object"},
    },
}

DIFF_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "gpuemu-ci baseline diff (results.json `diff`)",
    "type": "object",
    "required": ["status", "message", "baseline", "summary_line", "regressions", "warnings", "entries"],
    "additionalProperties": False,
    "properties": {
        "status": {"enum": [s.value for s in DiffStatus]},
        "message": {"type": "string"},
        "baseline": {"oneOf": [{"type": "null"}, BASELINE_INFO_SCHEMA]},
        "summary_line": {"type": "string"},
        "regressions": {"type": "integer", "minimum": 0},
        "warnings": {"type": "integer", "minimum": 0},
        "counts": {
            "type": "object",
            "additionalProperties": False,
            "properties": {c.value: {"type": "integer", "minimum": 0} for c in Classification},
        },
        "gate": {
            "type": "object",
            "required": ["fail_on_regression", "failed"],
            "properties": {"fail_on_regression": {"type": "boolean"}, "failed": {"type": "boolean"}},
        },
        "notes": {"type": "array", "items": REASON_SCHEMA},
        "entries": {"type": "array", "items": ENTRY_SCHEMA},
    },
}
