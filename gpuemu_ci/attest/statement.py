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
    # Where each known field's value came from (a `Source`), as the statement records it for `verify` to show.
    sources: tuple[tuple[str, str], ...] = ()

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
        """The run section of the predicate (without issued_at and nonce): every field, and `sources` (field ->
        where its value came from) for the known ones."""
        claims = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "sources"}
        claims["sources"] = dict(self.sources)
        return claims


class Source(StrEnum):
    """Where the signer took a binding field from (the statement says it for each: `verify` shows it)."""

    ENVIRONMENT = "environment"  # the signer's own GITHUB_* variables and event: what it observed itself
    FLAG = "flag"  # given to `gpuemu-ci sign` by whoever ran it
    RESULTS = "results"  # the results document's own claim, which the signer could not check
    ORIGIN = "origin"  # the repository of the local clone's `origin` remote (`sign` outside Actions)


# Fields the signer's environment settles when it knows them: the results document may only agree.
ENVIRONMENT_BOUND = ("repo", "repo_id", "event", "run_id", "pr", "server_url")
FLAG_OF = {"repo_id": "--repo-id", "run_id": "--run-id", "server_url": "--server-url"}


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
    """The run context a statement is bound to, each field with its `Source`: a flag first; then, for the
    fields the signer's environment knows (`ENVIRONMENT_BOUND`: repository, its id, event, run, pull request,
    server), the environment; then what the results document records about its run.

    The results document is the code under test's (or an artifact's): its claims are checked, never trusted
    where the signer can see for itself. A document that names another repository, repository id, event, run or
    pull request than the environment, another commit than every commit this CI run is about (`ci_commits`), or
    a later attempt of the run than the signer's, is refused (unless a flag settles that field) rather than
    vouched for. The commit and attempt are the document's (a separate signing job has its own GITHUB_SHA and
    may run in a later attempt), checked so. Outside CI only flags and the document are there.
    """
    recorded = RunContext.from_results(results)
    values: dict[str, Any] = {}
    sources: list[tuple[str, str]] = []
    for spec in fields(RunContext):
        name = spec.name
        if name == "sources":
            continue
        flag, seen, claimed = getattr(flags, name), getattr(env_context, name), getattr(recorded, name)
        if flag is not None:
            value, source = flag, Source.FLAG
        elif name in ENVIRONMENT_BOUND and seen is not None:
            if claimed is not None and not _same(name, claimed, seen):
                raise UsageError(_disagreement(name, claimed, seen))
            value, source = seen, Source.ENVIRONMENT
        elif name == "commit" and ci_commits:
            if claimed is not None and claimed.lower() not in ci_commits:
                raise UsageError(
                    f"results.json says it tested commit {claimed}, but this CI run is about "
                    f"{' / '.join(sorted(ci_commits))}; a results file of another commit is not signed as this "
                    "run's (pass --commit to sign it anyway)"
                )
            value, source = (
                (claimed, Source.ENVIRONMENT) if claimed is not None else (seen, Source.ENVIRONMENT)
            )
        elif name == "run_attempt" and claimed is not None and seen is not None and claimed > seen:
            raise UsageError(
                f"results.json says it ran in attempt {claimed} of the run, but this job runs in attempt {seen}; "
                "it cannot have come from this run (pass --run-attempt to sign it anyway)"
            )
        elif claimed is not None:
            value, source = claimed, Source.RESULTS
        else:
            value, source = seen, Source.ENVIRONMENT
        values[name] = value
        if value is not None:
            sources.append((name, source.value))
    return RunContext(**values, sources=tuple(sources))


def _same(name: str, claimed: Any, seen: Any) -> bool:
    if name == "repo":
        return bool(str(claimed).lower() == str(seen).lower())
    if name == "server_url":
        return bool(str(claimed).rstrip("/") == str(seen).rstrip("/"))
    return bool(claimed == seen)


def _disagreement(name: str, claimed: Any, seen: Any) -> str:
    what = {
        "repo": "was produced in repository",
        "repo_id": "was produced in the repository with id",
        "event": "was produced by a run for the event",
        "run_id": "was produced in run",
        "pr": "is about pull request",
        "server_url": "was produced on",
    }[name]
    here = {
        "repo": "this job runs in",
        "repo_id": "this job's repository has id",
        "event": "this job runs for",
        "run_id": "this job runs in run",
        "pr": "this run is about pull request",
        "server_url": "this job runs on",
    }[name]
    flag = FLAG_OF.get(name, f"--{name}")
    return (
        f"results.json says it {what} {claimed!s}, but {here} {seen!s}: its claims disagree with the environment "
        f"that signs it, so it is not signed as this run's (pass {flag} to sign it anyway)"
    )


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
