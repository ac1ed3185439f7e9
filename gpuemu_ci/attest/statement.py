"""The in-toto Statement v1 that a gpuemu-ci report signs, and the run context it is bound to.

Building: `build_statement(results, ...)` takes a results document (`results.model.Results`)
and the run context and returns the statement; `canonical_bytes` serialises it with RFC 8785
(JCS) so that the same inputs always give the same payload bytes. JCS numbers are IEEE-754
doubles, so seeds and GitHub ids are written as decimal strings; any other integer beyond 2^53
and any non-finite float in a copied section becomes a string too.

The run context (`RunContext`) binds the report to a repository, commit, run, PR and event, so
that a valid report cannot be presented for another commit or repository. Reading a statement
back, after its signature holds, is `verify_policy.parse_statement`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

import msgspec
import rfc8785

from gpuemu_ci import __version__
from gpuemu_ci.clock import format_utc
from gpuemu_ci.errors import UsageError
from gpuemu_ci.github.context import RunVariables, load_event
from gpuemu_ci.results.model import Results, RunInfo

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://gpuemu.dev/attestation/correctness-report/v1"
UNSIGNED_REASON = "no signing key was available (secrets are not passed to pull requests from forks)"

_SAFE_INT = 2**53 - 1
_SHA256 = re.compile(r"[0-9a-f]{64}")
_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
_COMMIT = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")


class ResultsFormatError(UsageError):
    """The results document lacks a field the statement needs, or has the wrong type (exit 2)."""


class SignatureStatus(StrEnum):
    """Whether the report was produced with a signing key."""

    SIGNED = "signed"
    UNSIGNED = "unsigned"


def normalize_repo(text: str) -> str:
    """Check an `owner/name` repository; ValueError when it is not one."""
    if not _REPO.fullmatch(text):
        raise ValueError(f"{text!r} is not an owner/name repository")
    return text


def normalize_commit(text: str) -> str:
    """Check a full git commit id (40 or 64 hex digits) and lower-case it; ValueError otherwise."""
    value = text.strip().lower()
    if not _COMMIT.fullmatch(value):
        raise ValueError(f"{text!r} is not a full commit id (40 or 64 hex digits)")
    return value


@dataclass(frozen=True)
class RunContext:
    """Where and when a report was produced; every field may be unknown (None) until merged.

    GitHub ids are decimal strings, because JCS numbers are doubles.
    """

    repo: str | None = None
    repo_id: str | None = None
    commit: str | None = None
    pr: int | None = None
    event: str | None = None
    run_id: str | None = None
    run_attempt: int | None = None
    job: str | None = None
    server_url: str | None = None

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> RunContext:
        """Read the GITHUB_* variables of an Actions job (and the PR number from the event file)."""
        found = RunVariables.from_env(env)
        return cls(
            repo=found.repository,
            repo_id=None if found.repository_id is None else str(found.repository_id),
            commit=found.sha,
            pr=_pr_from_event(load_event(found.event_path, missing_ok=True)),
            event=found.event_name,
            run_id=None if found.run_id is None else str(found.run_id),
            run_attempt=found.run_attempt,
            job=found.job,
            server_url=found.server_url,
        )

    @classmethod
    def from_results(cls, results: Results) -> RunContext:
        """What the gate run recorded about itself in results.json (`run`, else `git` for the commit)."""
        run = results.run or RunInfo()
        return cls(
            repo=run.repo,
            repo_id=run.repo_id,
            commit=results.tested_commit,
            pr=run.pr,
            event=run.event,
            run_id=run.run_id,
            run_attempt=run.run_attempt,
            job=run.job,
            server_url=run.server_url,
        )

    def require_binding(self) -> RunContext:
        """Check every known field and insist on repo and commit; UsageError names the problem."""
        if self.repo is None:
            raise UsageError("the repository is unknown: pass --repo OWNER/NAME (or run in GitHub Actions)")
        if self.commit is None:
            raise UsageError("the tested commit is unknown: pass --commit SHA (or run in GitHub Actions)")
        try:
            checked = replace(self, repo=normalize_repo(self.repo), commit=normalize_commit(self.commit))
        except ValueError as e:
            raise UsageError(str(e)) from None
        for name in ("repo_id", "run_id"):
            value = getattr(self, name)
            if value is not None and not value.isdigit():
                raise UsageError(f"{name} {value!r} is not a number")
        for name in ("pr", "run_attempt"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UsageError(f"{name} must be a positive number, not {value}")
        return checked

    def as_claims(self) -> dict[str, Any]:
        """The run section of the predicate (without issued_at and nonce)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def ci_commits(env: Mapping[str, str]) -> frozenset[str]:
    """Every commit the current CI run is about: GITHUB_SHA, and from the event the pull request's head, the
    pushed commit, or the head of the run a `workflow_run` event is about. Empty outside CI."""
    found = RunVariables.from_env(env)
    event = load_event(found.event_path, missing_ok=True)
    candidates: list[Any] = [found.sha, event.get("after")]
    for key in ("pull_request", "workflow_run"):
        section = event.get(key)
        if isinstance(section, dict):
            head = section.get("head")
            candidates.append(head.get("sha") if isinstance(head, dict) else None)
            candidates.append(section.get("head_sha"))
    return frozenset(c.lower() for c in candidates if isinstance(c, str) and _COMMIT.fullmatch(c.lower()))


def _pr_from_event(event: Mapping[str, Any]) -> int | None:
    """The pull request number of a webhook payload, if there is exactly one."""
    candidates: list[Any] = [event.get("pull_request")]
    workflow_run = event.get("workflow_run")
    # A workflow_run event lists the PRs of the triggering run; only an unambiguous one counts.
    if isinstance(workflow_run, dict):
        listed = workflow_run.get("pull_requests")
        if isinstance(listed, list) and len(listed) == 1:
            candidates.append(listed[0])
    for candidate in candidates:
        if isinstance(candidate, dict):
            number = candidate.get("number")
            if isinstance(number, int) and not isinstance(number, bool):
                return number
    return None


def build_statement(
    results: Results,
    *,
    results_name: str,
    results_sha256: str,
    context: RunContext,
    signer_keyid: str | None,
    issued_at: datetime,
    nonce: str,
) -> dict[str, Any]:
    """The in-toto Statement for one results document; `signer_keyid` None means unsigned.

    `context` must carry at least repo and commit (RunContext.require_binding).
    """
    ctx = context.require_binding()
    subjects: dict[str, dict[str, Any]] = {}
    server = (ctx.server_url or "https://github.com").rstrip("/")
    _add_subject(subjects, f"git+{server}/{ctx.repo}", "gitCommit", ctx.commit or "")
    _add_subject(subjects, results.config.path, "sha256", _sha(results.config.sha256, "config.sha256"))
    for index, kernel in enumerate(results.kernels):
        if kernel.source_sha256 is not None:
            _add_subject(
                subjects,
                kernel.source,
                "sha256",
                _sha(kernel.source_sha256, f"kernels[{index}].source_sha256"),
            )
    _add_subject(subjects, results_name, "sha256", results_sha256)

    signature: dict[str, Any] = (
        {"status": SignatureStatus.SIGNED.value, "keyid": signer_keyid}
        if signer_keyid is not None
        else {"status": SignatureStatus.UNSIGNED.value, "reason": UNSIGNED_REASON}
    )
    signature["signer"] = f"gpuemu-ci {__version__}"
    environment = msgspec.to_builtins(results.environment)
    predicate = {
        "verdict": results.verdict.value,
        "exit_code": results.exit_code,
        "suite": results.suite,
        "cut_short": results.cut_short,
        "seed": str(results.seed),
        "generator_version": results.generator_version,
        "tool": jcs_safe(msgspec.to_builtins(results.tool)),
        "started_at": results.started_at,
        "finished_at": results.finished_at,
        "summary": jcs_safe(msgspec.to_builtins(results.summary)),
        "results": _op_dtype_rows(results),
        "failures": _failures(results),
        "kernels": _kernel_rows(results),
        "lint": jcs_safe(msgspec.to_builtins(results.lint)),
        "diff": jcs_safe(msgspec.to_builtins(results.diff)),
        "environment": jcs_safe({k: environment.get(k) for k in ("gpu", "python", "numpy", "platform")}),
        "results_document": {"name": results_name, "sha256": results_sha256},
        "signature": signature,
        "run": {**ctx.as_claims(), "issued_at": format_utc(issued_at), "nonce": nonce},
    }
    return {
        "_type": STATEMENT_TYPE,
        "subject": list(subjects.values()),
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }


def canonical_bytes(statement: Mapping[str, Any]) -> bytes:
    """RFC 8785 serialisation: the exact payload bytes that get signed."""
    try:
        return rfc8785.dumps(statement)
    except rfc8785.CanonicalizationError as e:  # jcs_safe should have prevented this
        raise ResultsFormatError(f"results document cannot be canonicalised: {e}") from None


def jcs_safe(value: Any) -> Any:
    """A copy of JSON data that RFC 8785 accepts: big ints and non-finite floats become strings."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value if -_SAFE_INT <= value <= _SAFE_INT else str(value)
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Mapping):
        return {str(k): jcs_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jcs_safe(v) for v in value]
    raise ResultsFormatError(f"results document holds a value JSON cannot carry ({type(value).__name__})")


def context_for_results(
    results: Results, env_context: RunContext, flags: RunContext, ci_commits: frozenset[str] = frozenset()
) -> RunContext:
    """Merge the run context: CLI flags, then the results document's `run`/`git`, then the environment.

    The results document comes first because it is what the gate run recorded about itself (a
    separate signing job or a `workflow_run` workflow sees a different GITHUB_SHA and job). But the document
    is checked against the CI environment first: when it names another repository, or another commit than
    every commit this CI run is about (`ci_commits`), the signer refuses, unless a flag settles it, rather
    than vouch for a run it did not observe.
    """
    recorded = RunContext.from_results(results)
    conflict = recorded.repo and env_context.repo and recorded.repo.lower() != env_context.repo.lower()
    if flags.repo is None and conflict:
        raise UsageError(
            f"results.json was produced in {recorded.repo} but this job runs in {env_context.repo};"
            " pass --repo to sign it anyway"
        )
    if flags.commit is None and recorded.commit and ci_commits and recorded.commit.lower() not in ci_commits:
        raise UsageError(
            f"results.json says it tested commit {recorded.commit}, but this CI run is about "
            f"{' / '.join(sorted(ci_commits))}; a results file of another commit is not signed as this run's "
            "(pass --commit to sign it anyway)"
        )
    merged = flags
    for fallback in (recorded, env_context):
        merged = replace(
            merged,
            **{f.name: getattr(fallback, f.name) for f in fields(merged) if getattr(merged, f.name) is None},
        )
    return merged


def _add_subject(subjects: dict[str, dict[str, Any]], name: str, algorithm: str, digest: str) -> None:
    existing = subjects.get(name)
    if existing is not None and existing["digest"] != {algorithm: digest}:
        raise ResultsFormatError(f"results document gives {name} two different digests")
    subjects[name] = {"name": name, "digest": {algorithm: digest}}


def _op_dtype_rows(results: Results) -> list[dict[str, Any]]:
    """One verdict row per op x dtype; an op with no dtype entries (skipped, errored) gets one row."""
    rows: list[dict[str, Any]] = []
    for op in results.ops:
        base = {"op": op.name, "skip_reason": op.skip_reason}
        if not op.dtypes:
            rows.append({**base, "dtype": None, "status": op.status.value, **_ROW_EMPTY})
        for entry in op.dtypes:
            row = {**base, "dtype": entry.dtype, "status": entry.status.value}
            for key in _ROW_EMPTY:
                row[key] = jcs_safe(getattr(entry, key))
            rows.append(row)
    return rows


_ROW_EMPTY: dict[str, Any] = dict.fromkeys(
    ("cases_total", "cases_failed", "worst_headroom", "max_abs_error", "comparator")
)


def _failures(results: Results) -> list[dict[str, Any]]:
    """Every recorded failure with its seed and replay command, so the signed report can be replayed."""
    return [
        {
            "op": op.name,
            "dtype": failure.dtype,
            "case_id": failure.case_id,
            "case_seed": str(failure.case_seed),
            "kind": failure.kind,
            "replay": failure.replay,
        }
        for op in results.ops
        for failure in op.failures
    ]


def _kernel_rows(results: Results) -> list[dict[str, Any]]:
    return [
        {
            "name": kernel.name,
            "source": kernel.source,
            "status": kernel.status.value,
            "violations": len(kernel.violations),
            "error": kernel.error is not None,
        }
        for kernel in results.kernels
    ]


def _sha(value: str, where: str) -> str:
    value = value.lower()
    if not _SHA256.fullmatch(value):
        raise ResultsFormatError(f"results document: {where} is not a sha256 hex digest")
    return value
