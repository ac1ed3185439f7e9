"""SARIF 2.1.0 for code scanning: built as data, serialised with `json`.

One result per failing op x dtype, located at the line of the op's ``[[ops]]`` table in
gpuemu.toml; one per kernel lint violation, located at the kernel's source (at the entry's
definition when the source is at hand, else its first line) with the ``[[kernels]]`` table as a
related location; one per compile error at the line the compiler named. Skipped and unloadable
ops, and a lint that could not run, are tool notifications, not alerts: they are not findings in
the code, but they are not hidden either.

Each result carries a ``partialFingerprints`` entry derived from what it is about (op, dtype;
kernel, entry, arch, check), never from seeds or line numbers, so that code scanning tracks the
same problem across runs and edits.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuemu_ci.render import text
from gpuemu_ci.render.sources import entry_lines
from gpuemu_ci.results.kernels import KernelResult, LintStatus, Violation
from gpuemu_ci.results.model import FailureGroup, Headline, OpResult, OpStatus, Results

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/gpuemu/gpuemu-ci"
FINGERPRINT_KEY = "gpuemuFinding/v1"
SRCROOT = "%SRCROOT%"

# Descriptions of the ways a case fails (results.json `failures[].kind`).
OP_RULES: dict[str, str] = {
    "mismatch": "The op's output differs from the fp64 reference by more than the allowed error.",
    "nonfinite": "The op's output has NaN or Inf where the reference does not (or the reverse).",
    "invariant": "The op's output breaks a declared invariant (shape, sign, normalisation, ...).",
    "shape": "The op's output has the wrong shape.",
    "dtype": "The op's output has the wrong dtype.",
    "crashed": "The op crashed the worker process (segfault, illegal address, abort).",
    "timeout": "The op did not finish within the case timeout.",
    "oom": "The op ran out of memory.",
    "raised": "The op raised an exception.",
    "inputs_modified": "The op modified its inputs.",
    "nondeterministic": "An op declared deterministic gave different bits on a re-run.",
    "bias": "The op's rounding is biased (a z-test over outputs rounded to a 16-bit type).",
    "unwritten": "The op left part of its output buffer unwritten.",
    "bad_output": "The op returned something that is not an array (or a tuple of arrays).",
    "out_of_bounds": "A Triton kernel read or wrote outside the tensors it was given (checked per lane on CPU).",
    "race": "Programs of one Triton launch read or overwrote each other's results: their order decides it.",
    "undefined_masked_lanes": "A Triton kernel's outputs depend on masked-off lanes of a load without `other`, "
    "which Triton leaves undefined (NVIDIA and AMD read 0 today).",
    "tampered": "The op changed gpuemu-ci's Triton layer while it ran: the checks it was promised may not have run.",
    "inputs_differ": "The op's inputs are not a function of the case's seed (an inputs hook that draws its own "
    "randomness): the case could not be judged.",
}
NOT_JUDGED = "not-judged"
COMPILE_ERROR = "compile-error"


@dataclass(frozen=True)
class _Rule:
    id: str
    name: str
    description: str
    level: str


def render_sarif(report: Results, *, job: str | None = None, source_root: Path | None = None) -> str:
    """The SARIF log as JSON text. ``source_root``: where kernel sources can be read to locate entries."""
    return (
        json.dumps(sarif_log(report, job=job, source_root=source_root), indent=2, ensure_ascii=False) + "\n"
    )


def sarif_log(report: Results, *, job: str | None = None, source_root: Path | None = None) -> dict[str, Any]:
    """The SARIF log as a dict (one run)."""
    rules: dict[str, _Rule] = {}
    results: list[dict[str, Any]] = []
    for group in report.failure_groups():
        results.append(_op_result(report, group, rules, errored=False))
    for group in report.errored_groups():
        results.append(_op_result(report, group, rules, errored=True))
    for op in _unrun_ops(report):
        if not report.cut_short:  # an op that cannot load is the repository's problem: an alert
            rules.setdefault(
                "op/error",
                _Rule(
                    "op/error",
                    "error",
                    "The op could not be run: it or its reference does not load.",
                    "error",
                ),
            )
            results.append(
                {
                    "ruleId": "op/error",
                    "level": "error",
                    "message": {"text": f"{op.name}: {op.message or 'the op errored'}"},
                    "locations": [_location(report.config.path, op.line)],
                    "partialFingerprints": _fingerprint("op", op.name, "error"),
                    "properties": {"op": op.name},
                }
            )
    for kernel in report.kernels:
        lines = entry_lines(report, kernel, source_root)
        for violation in kernel.violations:
            results.append(_violation_result(report, kernel, violation, lines, rules))
        if kernel.error is not None:
            results.append(_compile_result(report, kernel, rules))
    ordered = sorted(rules.values(), key=lambda r: r.id)
    index = {rule.id: i for i, rule in enumerate(ordered)}
    for result in results:
        result["ruleIndex"] = index[result["ruleId"]]
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "gpuemu-ci",
                "version": report.tool.version or "0",
                "informationUri": INFORMATION_URI,
                "rules": [_rule_json(rule) for rule in ordered],
            }
        },
        "invocations": [
            {
                "executionSuccessful": report.headline in (Headline.PASSED, Headline.FAILED),
                "toolExecutionNotifications": _notifications(report),
            }
        ],
        "results": results,
        "columnKind": "unicodeCodePoints",
        "properties": {
            "verdict": report.headline.value,
            "seed": str(report.seed),
            "suite": report.suite,
            "generatorVersion": report.generator_version,
            "tritonInterpreterOps": [op.name for op in report.interpreted_ops],
            "skippedCases": report.summary.cases_skipped,
        },
    }
    if job:
        run["automationDetails"] = {"id": f"gpuemu-ci/{job}/"}
    if report.tested_commit and report.run and report.run.repo and report.run.server_url:
        run["versionControlProvenance"] = [
            {
                "repositoryUri": f"{report.run.server_url.rstrip('/')}/{report.run.repo}",
                "revisionId": report.tested_commit,
            }
        ]
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}


def _rule_json(rule: _Rule) -> dict[str, Any]:
    return {
        "id": rule.id,
        "name": rule.name,
        "shortDescription": {"text": rule.description},
        "fullDescription": {"text": rule.description},
        "help": {
            "text": rule.description + " Replay a failing case with the command in the result's message."
        },
        "defaultConfiguration": {"level": rule.level},
    }


def _fingerprint(*parts: str) -> dict[str, str]:
    digest = hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()[:32]
    return {FINGERPRINT_KEY: digest}


def _location(path: str, line: int | None, message: str | None = None) -> dict[str, Any]:
    # A repository path is relative to the checkout (%SRCROOT%); an absolute one (a kernel source
    # outside the repository) can only be a file: URI.
    artifact = (
        {"uri": "file://" + _uri(path)} if path.startswith("/") else {"uri": _uri(path), "uriBaseId": SRCROOT}
    )
    location: dict[str, Any] = {
        "physicalLocation": {
            "artifactLocation": artifact,
            # Code scanning needs a line; a file-level finding points at line 1.
            "region": {"startLine": line if line and line > 0 else 1},
        }
    }
    if message:
        location["message"] = {"text": message}
    return location


def _uri(path: str) -> str:
    """``path`` as a URI reference: percent-encode (as UTF-8) every character a URI cannot hold."""
    return re.sub(
        r"[^A-Za-z0-9._~/!$&'()*+,;=:@-]",
        lambda m: "".join(f"%{b:02X}" for b in m.group().encode()),
        path,
    )


def _op_result(
    report: Results, group: FailureGroup, rules: dict[str, _Rule], *, errored: bool
) -> dict[str, Any]:
    worst = group.worst
    kind = NOT_JUDGED if errored else (worst.kind if worst else "mismatch")
    rule_id = f"op/{kind}"
    if rule_id not in rules:
        description = (
            "The op could not be judged on the case: the reference, an inputs hook or the case's setup failed, "
            "or the case needs a GPU (the message says which)."
            if errored
            else OP_RULES.get(kind, f"The op failed a {kind} check.")
        )
        rules[rule_id] = _Rule(rule_id, kind, description, "warning" if errored else "error")
    message = text.group_title(group)
    if worst is not None:
        message += f"; worst case {worst.case_id}: {text.error_vs_allowed(worst)}"
        message += f" ({text.first_line(worst.message, 300)})" if worst.message else ""
        message += f". Pattern: {worst.pattern}" if worst.pattern else ""
        message += f". Where: {worst.where}" if worst.where else ""
        message += f". Replay: {worst.replay}"
    properties: dict[str, Any] = {
        "op": group.op.name,
        "dtype": group.dtype,
        "kinds": sorted({f.kind for f in group.failures}),
    }
    if group.row is not None:
        properties.update(
            failedCases=group.row.cases_errored if errored else group.row.cases_failed,
            totalCases=group.row.cases_total,
            worstHeadroom=group.row.worst_headroom,
        )
    if worst is not None:
        properties.update(caseId=worst.case_id, caseSeed=str(worst.case_seed), replay=worst.replay)
    return {
        "ruleId": rule_id,
        "level": "warning" if errored else "error",
        "message": {"text": message},
        "locations": [_location(report.config.path, group.op.line)],
        "partialFingerprints": _fingerprint(
            "op", group.op.name, group.dtype, "errored" if errored else "failed"
        ),
        "properties": properties,
    }


def _violation_result(
    report: Results,
    kernel: KernelResult,
    violation: Violation,
    lines: dict[str, int],
    rules: dict[str, _Rule],
) -> dict[str, Any]:
    metric = re.sub(r"[^A-Za-z0-9_.-]+", "-", violation.metric).strip("-") or "check"
    rule_id = f"kernel/{metric}"
    if rule_id not in rules:
        rules[rule_id] = _Rule(
            rule_id,
            metric,
            f"A compiled kernel exceeds its configured {violation.metric} limit, as its compiler reports it "
            "(ptxas -v, PTX or SASS for CUDA; the AMDGPU compiler, its disassembly or LLVM IR for HIP).",
            "error",
        )
    level = "error" if violation.severity == "error" else "warning"
    message = (
        violation.message
        or f"{violation.kernel} [{violation.arch}]: {violation.metric} {violation.value} "
        f"exceeds {violation.limit}"
    )
    return {
        "ruleId": rule_id,
        "level": level,
        "message": {"text": f"kernel {kernel.name}: {message}"},
        "locations": [_location(report.repo_path(kernel.source), lines.get(violation.kernel))],
        "relatedLocations": [
            dict(_location(report.config.path, kernel.line, "the [[kernels]] entry and its limits"), id=1)
        ],
        "partialFingerprints": _fingerprint(
            "kernel", kernel.name, violation.kernel, violation.arch, violation.metric
        ),
        "properties": {
            "kernel": kernel.name,
            "entry": violation.kernel,
            "arch": violation.arch,
            "metric": violation.metric,
            "limit": violation.limit,
            "value": violation.value,
        },
    }


def _compile_result(report: Results, kernel: KernelResult, rules: dict[str, _Rule]) -> dict[str, Any]:
    error = kernel.error
    assert error is not None
    rule_id = f"kernel/{COMPILE_ERROR}"
    rules.setdefault(rule_id, _Rule(rule_id, COMPILE_ERROR, "The kernel source does not compile.", "error"))
    path = report.repo_path(error.file) if error.file else report.repo_path(kernel.source)
    return {
        "ruleId": rule_id,
        "level": "error",
        "message": {
            "text": f"kernel {kernel.name} does not compile{f' ({error.arch})' if error.arch else ''}: "
            f"{error.message}"
        },
        "locations": [_location(path, error.line)],
        "partialFingerprints": _fingerprint("kernel", kernel.name, COMPILE_ERROR),
        "properties": {"kernel": kernel.name, "arch": error.arch},
    }


def _notifications(report: Results) -> list[dict[str, Any]]:
    notes: list[dict[str, Any]] = []

    def add(level: str, message: str) -> None:
        notes.append({"level": level, "message": {"text": message}})

    for op in report.ops:
        if op.status is OpStatus.SKIPPED and not op.dtypes:
            add(
                "warning",
                f"op {op.name} was skipped ({op.skip_reason or 'no reason given'}) and not tested"
                + (f": {op.message}" if op.message else ""),
            )
    for op, row in report.skipped_rows():
        add("warning", text.skipped_row(op, row))
    for op, row, used in report.near_limit():
        add("warning", text.near_limit(op, row, used, report.warn_threshold or 0.0))
    interpreted = text.interpreter_line(report)
    if interpreted:
        add("note", interpreted)
    if report.cut_short:
        for op in _unrun_ops(report):
            add("error", f"op {op.name} errored: {op.message or 'no case ran'}")
    for kernel in report.kernels:
        if kernel.status.value in ("error", "skipped") and kernel.error is None:
            add(
                "error" if kernel.status.value == "error" else "warning",
                f"kernel {kernel.name} was not linted ({kernel.status.value})",
            )
    if report.lint.status in (LintStatus.DISABLED, LintStatus.UNAVAILABLE):
        add(
            "warning",
            f"kernel lint did not run ({report.lint.status})"
            + (f": {report.lint.reason}" if report.lint.reason else ""),
        )
    for note in report.notes:
        add("warning", note)
    if not report.executed:
        add("error", "nothing was tested")
    return notes


def _unrun_ops(report: Results) -> list[OpResult]:
    """Errored ops with no case record to show (not loadable, or never reached before the timeout)."""
    grouped = {g.op.name for g in report.errored_groups()}
    return [op for op in report.ops if op.status is OpStatus.ERROR and op.name not in grouped]
