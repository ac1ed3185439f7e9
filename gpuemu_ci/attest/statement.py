"""The in-toto Statement v1 that a gpuemu-ci report signs, and the run context it is bound to.

Building: `build_statement(results, ...)` takes a results document (results.json, version "1")
and the run context and returns the statement; `canonical_bytes` serialises it with RFC 8785
(JCS) so that the same inputs always give the same payload bytes. JCS numbers are IEEE-754
doubles, so seeds and GitHub ids are written as decimal strings; any other integer beyond 2^53
and any non-finite float in a copied section becomes a string too.

The run context (`RunContext`) binds the report to a repository, commit, run, PR and event, so
that a valid report cannot be presented for another commit or repository. Reading a statement
back, after its signature holds, is `verify_policy.parse_statement`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import datetime, timezone
from enum import Enum
from typing import Any

import rfc8785

from gpuemu_ci import __version__
from gpuemu_ci.errors import UsageError

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://gpuemu.dev/attestation/correctness-report/v1"
UNSIGNED_REASON = "no signing key was available (secrets are not passed to pull requests from forks)"

_SAFE_INT = 2**53 - 1
_SHA256 = re.compile(r"[0-9a-f]{64}")
_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
_COMMIT = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")


class ResultsFormatError(UsageError):
    """The results document lacks a field the statement needs, or has the wrong type (exit 2)."""


class SignatureStatus(str, Enum):
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

        def text(name: str) -> str | None:
            return env.get(name) or None

        def number(name: str) -> int | None:
            value = text(name)
            if value is not None and not value.isdigit():
                raise UsageError(f"environment variable {name}={value!r} is not a number")
            return None if value is None else int(value)

        for name in ("GITHUB_REPOSITORY_ID", "GITHUB_RUN_ID"):
            number(name)
        return cls(
            repo=text("GITHUB_REPOSITORY"),
            repo_id=text("GITHUB_REPOSITORY_ID"),
            commit=text("GITHUB_SHA"),
            pr=_pr_from_event(text("GITHUB_EVENT_PATH")),
            event=text("GITHUB_EVENT_NAME"),
            run_id=text("GITHUB_RUN_ID"),
            run_attempt=number("GITHUB_RUN_ATTEMPT"),
            job=text("GITHUB_JOB"),
            server_url=text("GITHUB_SERVER_URL"),
        )

    @classmethod
    def from_results(cls, results: Mapping[str, Any]) -> RunContext:
        """What the gate run recorded about itself in results.json (`run` and `git`)."""
        run = _get(results, "run", dict, "", default={})
        git = _get(results, "git", dict, "", default={})

        def ident(key: str) -> str | None:
            value = _get(run, key, (int, str), "run", default=None)
            return None if value is None else str(value)

        return cls(
            repo=_get(run, "repo", str, "run", default=None),
            repo_id=ident("repo_id"),
            commit=_get(git, "commit", str, "git", default=None),
            pr=_get(run, "pr", int, "run", default=None),
            event=_get(run, "event", str, "run", default=None),
            run_id=ident("run_id"),
            run_attempt=_get(run, "run_attempt", int, "run", default=None),
            job=_get(run, "job", str, "run", default=None),
            server_url=_get(run, "server_url", str, "run", default=None),
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


def _pr_from_event(path: str | None) -> int | None:
    """The pull request number from the webhook payload at GITHUB_EVENT_PATH, if there is one."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            event = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read the event payload GITHUB_EVENT_PATH={path}: {e}") from None
    if not isinstance(event, dict):
        return None
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


def format_time(moment: datetime) -> str:
    """RFC 3339 UTC with second precision, e.g. 2026-11-22T10:00:00Z."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_statement(
    results: Mapping[str, Any],
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
    if _get(results, "schema_version", str, "") != "1":
        raise ResultsFormatError('results document: schema_version must be "1"')
    config = _get(results, "config", dict, "")
    subjects: dict[str, dict[str, Any]] = {}
    server = (ctx.server_url or "https://github.com").rstrip("/")
    _add_subject(subjects, f"git+{server}/{ctx.repo}", "gitCommit", ctx.commit)
    _add_subject(subjects, _get(config, "path", str, "config"), "sha256", _sha(config, "sha256", "config"))
    kernels = _get(results, "kernels", list, "", default=[])
    for index, kernel in enumerate(kernels):
        where = f"kernels[{index}]"
        kernel = _as(kernel, dict, where)
        digest = _get(kernel, "source_sha256", str, where, default=None)
        if digest is not None:
            _add_subject(
                subjects, _get(kernel, "source", str, where), "sha256", _sha(kernel, "source_sha256", where)
            )
    _add_subject(subjects, results_name, "sha256", results_sha256)

    signature: dict[str, Any] = (
        {"status": SignatureStatus.SIGNED.value, "keyid": signer_keyid}
        if signer_keyid is not None
        else {"status": SignatureStatus.UNSIGNED.value, "reason": UNSIGNED_REASON}
    )
    signature["signer"] = f"gpuemu-ci {__version__}"
    environment = _get(results, "environment", dict, "", default={})
    predicate = {
        "verdict": _get(results, "verdict", str, ""),
        "exit_code": _get(results, "exit_code", int, "", default=None),
        "suite": _get(results, "suite", str, "", default=None),
        "cut_short": _get(results, "cut_short", bool, "", default=False),
        "seed": _seed(_get(results, "seed", (int, str), "")),
        "generator_version": str(_get(results, "generator_version", (str, int), "")),
        "tool": jcs_safe(_get(results, "tool", dict, "")),
        "started_at": _get(results, "started_at", str, "", default=None),
        "finished_at": _get(results, "finished_at", str, "", default=None),
        "summary": jcs_safe(_get(results, "summary", dict, "", default={})),
        "results": _op_dtype_rows(results),
        "failures": _failures(results),
        "kernels": _kernel_rows(kernels),
        "lint": jcs_safe(_get(results, "lint", dict, "", default=None)),
        "diff": jcs_safe(_get(results, "diff", dict, "", default=None)),
        "environment": jcs_safe(
            {k: environment.get(k) for k in ("gpu", "python", "numpy", "platform") if k in environment}
        ),
        "results_document": {"name": results_name, "sha256": results_sha256},
        "signature": signature,
        "run": {**ctx.as_claims(), "issued_at": format_time(issued_at), "nonce": nonce},
    }
    _get(predicate["tool"], "version", str, "tool")
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


def context_for_results(results: Mapping[str, Any], env_context: RunContext, flags: RunContext) -> RunContext:
    """Merge the run context: CLI flags, then the results document's `run`/`git`, then the environment.

    The results document comes first because it is what the gate run recorded about itself (a
    separate signing job or a `workflow_run` workflow sees a different GITHUB_SHA and job). When
    the document and the environment name different repositories the signer refuses, unless a
    flag settles it, rather than vouch for a run it did not observe.
    """
    recorded = RunContext.from_results(results)
    conflict = recorded.repo and env_context.repo and recorded.repo.lower() != env_context.repo.lower()
    if flags.repo is None and conflict:
        raise UsageError(
            f"results.json was produced in {recorded.repo} but this job runs in {env_context.repo};"
            " pass --repo to sign it anyway"
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


def _op_dtype_rows(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One verdict row per op x dtype; an op with no dtype entries (skipped, errored) gets one row."""
    rows = []
    for index, op in enumerate(_get(results, "ops", list, "", default=[])):
        where = f"ops[{index}]"
        op = _as(op, dict, where)
        name = _get(op, "name", str, where)
        base = {"op": name, "skip_reason": _get(op, "skip_reason", str, where, default=None)}
        dtypes = _get(op, "dtypes", list, where, default=[])
        if not dtypes:
            rows.append({**base, "dtype": None, "status": _get(op, "status", str, where), **_ROW_EMPTY})
        for d_index, entry in enumerate(dtypes):
            d_where = f"{where}.dtypes[{d_index}]"
            entry = _as(entry, dict, d_where)
            row = {
                **base,
                "dtype": _get(entry, "dtype", str, d_where),
                "status": _get(entry, "status", str, d_where),
            }
            for key in _ROW_EMPTY:
                row[key] = jcs_safe(entry.get(key))
            rows.append(row)
    return rows


_ROW_EMPTY: dict[str, Any] = dict.fromkeys(
    ("cases_total", "cases_failed", "worst_headroom", "max_abs_error", "comparator")
)


def _failures(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every recorded failure with its seed and replay command, so the signed report can be replayed."""
    rows = []
    for index, op in enumerate(_get(results, "ops", list, "", default=[])):
        op = _as(op, dict, f"ops[{index}]")
        for f_index, failure in enumerate(_get(op, "failures", list, f"ops[{index}]", default=[])):
            where = f"ops[{index}].failures[{f_index}]"
            failure = _as(failure, dict, where)
            seed = _get(failure, "case_seed", (int, str), where, default=None)
            rows.append(
                {
                    "op": op.get("name"),
                    "dtype": _get(failure, "dtype", str, where, default=None),
                    "case_id": _get(failure, "case_id", str, where, default=None),
                    "case_seed": None if seed is None else _seed(seed),
                    "kind": _get(failure, "kind", str, where, default=None),
                    "replay": _get(failure, "replay", str, where, default=None),
                }
            )
    return rows


def _kernel_rows(kernels: list[Any]) -> list[dict[str, Any]]:
    rows = []
    for index, kernel in enumerate(kernels):
        where = f"kernels[{index}]"
        kernel = _as(kernel, dict, where)
        rows.append(
            {
                "name": _get(kernel, "name", str, where),
                "source": _get(kernel, "source", str, where, default=None),
                "status": _get(kernel, "status", str, where),
                "violations": len(_get(kernel, "violations", list, where, default=[])),
                "error": kernel.get("error") is not None,
            }
        )
    return rows


def _seed(value: int | str) -> str:
    text = str(value)
    if not text.isdigit():
        raise ResultsFormatError(f"results document: seed {text!r} is not a non-negative integer")
    return text


def _sha(obj: Mapping[str, Any], key: str, where: str) -> str:
    value = _get(obj, key, str, where).lower()
    if not _SHA256.fullmatch(value):
        raise ResultsFormatError(f"results document: {_join(where, key)} is not a sha256 hex digest")
    return value


_MISSING = object()


def _get(
    obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str, default: Any = _MISSING
) -> Any:
    """obj[key] checked against `kind`; a missing or null value gives `default` if one is set."""
    value = obj.get(key)
    if value is None:
        if default is _MISSING:
            raise ResultsFormatError(f"results document: {_join(where, key)} is missing")
        return default
    return _as(value, kind, _join(where, key))


def _as(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    # bool is an int in Python, but never a valid count or id here.
    if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, (int, str))):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise ResultsFormatError(f"results document: {where} must be {_ARTICLE.get(names, 'a')} {names}")
    return value


_ARTICLE = {"int": "an", "int or str": "an"}


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key
