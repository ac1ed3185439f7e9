"""Verifying a signed report: the signature over the exact bytes first, then the expectations.

`verify_report` is the whole procedure, in this order (each step runs only if the one before held):

1. Parse the envelope strictly and require payloadType `application/vnd.in-toto+json`
   (failure: MALFORMED).
2. Verify the Ed25519 signature over PAE(payloadType, payload) with the given public keys
   (no signature: BAD_SIGNATURE, "unsigned"; any other failure: BAD_SIGNATURE).
3. Only now parse the payload, the verified bytes as they are (never re-canonicalised), into
   `ReportClaims`, checking `_type` and `predicateType` (failure: MALFORMED).
4. Run the expectations (`AllOf` of repo, repo id, commit, verdict, max age, artifact digests); every
   check runs and reports (any failure: EXPECTATION_MISMATCH).

The checks are small frozen objects that look only at claims, never at bytes or keys, so the
cryptography (`dsse`) and the policy stay apart.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import IntEnum, StrEnum
from pathlib import Path
from typing import Any, Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gpuemu_ci.attest import dsse
from gpuemu_ci.attest.statement import PREDICATE_TYPE, STATEMENT_TYPE, SignatureStatus, Source
from gpuemu_ci.files import sha256_of_file


class VerifyExit(IntEnum):
    """Exit codes of `gpuemu-ci verify` (they differ from errors.ExitCode on purpose)."""

    VALID = 0
    BAD_SIGNATURE = 1
    EXPECTATION_MISMATCH = 2
    MALFORMED = 3


class MalformedStatementError(ValueError):
    """Verified bytes that are not a gpuemu-ci in-toto statement."""


@dataclass(frozen=True)
class Subject:
    """An in-toto ResourceDescriptor: a name and its digests (algorithm -> lowercase hex)."""

    name: str
    digest: tuple[tuple[str, str], ...]

    def digest_of(self, algorithm: str) -> str | None:
        """The subject's digest for `algorithm` (`sha256`), or None when the statement gives none."""
        return dict(self.digest).get(algorithm)


@dataclass(frozen=True)
class ReportClaims:
    """What a verified statement claims."""

    subjects: tuple[Subject, ...]
    verdict: str
    repo: str
    repo_id: str | None
    commit: str
    pr: int | None
    event: str | None
    run_id: str | None
    run_attempt: int | None
    job: str | None
    issued_at: datetime
    nonce: str
    signature_status: SignatureStatus
    tool_version: str
    # (field, where the signer took it from: statement.Source) for each bound field; empty when the statement
    # predates the record (signed by an older gpuemu-ci).
    sources: tuple[tuple[str, str], ...] = ()


def parse_statement(payload: bytes) -> ReportClaims:
    """Parse verified payload bytes; MalformedStatementError says what is missing or wrong."""
    try:
        return _parse(dsse.strict_json_loads(payload))
    except ValueError as e:
        raise MalformedStatementError(f"statement: {e}") from None


class CheckKind(StrEnum):
    """Which expectation a check result is about."""

    REPO = "repo"
    REPO_ID = "repo_id"
    COMMIT = "commit"
    MAX_AGE = "max_age"
    ARTIFACT = "artifact"
    VERDICT = "verdict"


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one expectation: `ok`, what was expected, what the report says."""

    kind: CheckKind
    ok: bool
    expected: str
    actual: str
    message: str


class Check(Protocol):
    """An expectation about the claims of a report whose signature already holds."""

    def check(self, claims: ReportClaims) -> tuple[CheckResult, ...]:
        """One result per expectation checked (a composite gives its children's), each saying whether it
        held, what was expected, what the report claims, and a message for the person verifying."""
        ...


@dataclass(frozen=True)
class RepoIs(Check):
    """The report was produced in this repository (owner/name, compared case-insensitively)."""

    repo: str

    def check(self, claims: ReportClaims) -> tuple[CheckResult, ...]:
        ok = claims.repo.lower() == self.repo.lower()
        message = f"repo {claims.repo}" if ok else f"report is for repo {claims.repo}, expected {self.repo}"
        return (CheckResult(CheckKind.REPO, ok, self.repo, claims.repo, message),)


@dataclass(frozen=True)
class RepoIdIs(Check):
    """The report was produced in the repository with this numeric id (survives renames)."""

    repo_id: str

    def check(self, claims: ReportClaims) -> tuple[CheckResult, ...]:
        actual = claims.repo_id or "(none)"
        ok = claims.repo_id == self.repo_id
        message = f"repo id {actual}" if ok else f"report is for repo id {actual}, expected {self.repo_id}"
        return (CheckResult(CheckKind.REPO_ID, ok, self.repo_id, actual, message),)


@dataclass(frozen=True)
class CommitIs(Check):
    """The report is about this commit (full id)."""

    commit: str

    def check(self, claims: ReportClaims) -> tuple[CheckResult, ...]:
        ok = claims.commit == self.commit.lower()
        message = (
            f"commit {claims.commit}"
            if ok
            else f"report is for commit {claims.commit}, expected {self.commit}"
        )
        return (CheckResult(CheckKind.COMMIT, ok, self.commit, claims.commit, message),)


@dataclass(frozen=True)
class VerdictIs(Check):
    """The report states this verdict (a valid signature over a failed gate is still a failed gate)."""

    verdict: str

    def check(self, claims: ReportClaims) -> tuple[CheckResult, ...]:
        ok = claims.verdict == self.verdict
        message = (
            f"verdict {claims.verdict}"
            if ok
            else f"report's verdict is {claims.verdict}, required {self.verdict}"
        )
        return (CheckResult(CheckKind.VERDICT, ok, self.verdict, claims.verdict, message),)


@dataclass(frozen=True)
class MaxAge(Check):
    """The report was issued at most `max_age` before `now`, and not in the future beyond `skew`."""

    max_age: timedelta
    now: datetime
    skew: timedelta = timedelta(minutes=5)

    def check(self, claims: ReportClaims) -> tuple[CheckResult, ...]:
        age = self.now - claims.issued_at
        expected = f"at most {format_duration(self.max_age)} old"
        if age < -self.skew:
            message = f"report is issued in the future ({format_duration(-age)} ahead of this clock)"
            return (CheckResult(CheckKind.MAX_AGE, False, expected, f"{format_duration(age)} old", message),)
        actual = f"{format_duration(max(age, timedelta(0)))} old"
        ok = age <= self.max_age
        message = f"issued {actual}" if ok else f"report expired: issued {actual}, allowed {expected}"
        return (CheckResult(CheckKind.MAX_AGE, ok, expected, actual, message),)


@dataclass(frozen=True)
class ArtifactDigest(Check):
    """A local file is one of the report's subjects (same sha256; same name when a name matches)."""

    label: str
    sha256: str

    @classmethod
    def from_file(cls, path: Path) -> ArtifactDigest:
        """The digest of a regular file (a UsageError for a FIFO, a device or a file past 4 GiB)."""
        return cls(label=str(path), sha256=sha256_of_file(path, "artifact"))

    def check(self, claims: ReportClaims) -> tuple[CheckResult, ...]:
        label = self.label.replace("\\", "/")
        named = [
            s for s in claims.subjects if label == s.name or label.endswith("/" + s.name.removeprefix("./"))
        ]
        pool = named or list(claims.subjects)
        match = next((s for s in pool if s.digest_of("sha256") == self.sha256), None)
        if match is not None:
            message = f"artifact {self.label} matches subject {match.name}"
            return (CheckResult(CheckKind.ARTIFACT, True, self.sha256, self.sha256, message),)
        if named:
            expected = named[0].digest_of("sha256") or "(no sha256)"
            message = (
                f"artifact {self.label} differs from subject {named[0].name}:"
                f" sha256 {self.sha256}, signed {expected}"
            )
        else:
            expected = "(no subject)"
            message = f"artifact {self.label} (sha256 {self.sha256}) is not among the report's subjects"
        return (CheckResult(CheckKind.ARTIFACT, False, expected, self.sha256, message),)


@dataclass(frozen=True)
class AllOf(Check):
    """Every child check must hold. An empty list is refused: it would accept anything."""

    checks: tuple[Check, ...]

    def __post_init__(self) -> None:
        if not self.checks:
            raise ValueError("AllOf needs at least one check")

    def check(self, claims: ReportClaims) -> tuple[CheckResult, ...]:
        return tuple(result for child in self.checks for result in child.check(claims))


@dataclass(frozen=True)
class VerifyOutcome:
    """The result of `verify_report`: the exit code, a one-line reason, and what was verified."""

    exit: VerifyExit
    message: str
    keyids: tuple[str, ...] = ()
    claims: ReportClaims | None = None
    results: tuple[CheckResult, ...] = field(default=())

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        """The results that did not hold."""
        return tuple(r for r in self.results if not r.ok)


def verify_report(data: bytes, keys: Mapping[str, Ed25519PublicKey], policy: Check | None) -> VerifyOutcome:
    """Verify report bytes with `keys` (keyid -> public key), then `policy`; see the module docstring."""
    # (1) Envelope structure and payload type.
    try:
        envelope = dsse.Envelope.from_json(data, payload_type=dsse.PAYLOAD_TYPE_IN_TOTO)
    except dsse.MalformedEnvelopeError as e:
        return VerifyOutcome(VerifyExit.MALFORMED, f"malformed report: {e}")
    # (2) Signature over the exact bytes.
    try:
        verified = dsse.verify(envelope, keys)
    except dsse.UnsignedEnvelopeError:
        return VerifyOutcome(VerifyExit.BAD_SIGNATURE, "unsigned: the report carries no signature")
    except dsse.SignatureError as e:
        return VerifyOutcome(VerifyExit.BAD_SIGNATURE, f"bad signature: {e}")
    # (3) The verified payload, as it is.
    try:
        claims = parse_statement(verified.payload)
    except MalformedStatementError as e:
        return VerifyOutcome(VerifyExit.MALFORMED, f"malformed report: {e}", verified.keyids)
    # (4) Expectations.
    results = policy.check(claims) if policy is not None else ()
    failed = [r for r in results if not r.ok]
    if failed:
        reason = "; ".join(r.message for r in failed)
        return VerifyOutcome(VerifyExit.EXPECTATION_MISMATCH, reason, verified.keyids, claims, results)
    return VerifyOutcome(VerifyExit.VALID, "valid", verified.keyids, claims, results)


_DURATION_PART = re.compile(r"(\d+)([wdhms])")
_UNIT_SECONDS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text: str) -> timedelta:
    """Parse `7d`, `12h`, `30m`, `3600s`, `1w` or a combination like `1d12h`; ValueError otherwise."""
    compact = text.strip().lower()
    parts = _DURATION_PART.findall(compact)
    if not compact or "".join(n + u for n, u in parts) != compact:
        raise ValueError(f"{text!r} is not a duration like 7d, 12h, 30m or 3600s")
    try:
        return timedelta(seconds=sum(int(n) * _UNIT_SECONDS[u] for n, u in parts))
    except OverflowError:
        raise ValueError(f"{text!r} is too long a duration") from None


def format_duration(span: timedelta) -> str:
    """A short human form: 2d3h, 45m, 12s."""
    seconds = int(abs(span.total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    out = "".join(f"{v}{u}" for v, u in ((days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")) if v)
    return ("-" if span.total_seconds() < 0 else "") + (out or "0s")


def _parse(document: Any) -> ReportClaims:
    document = _obj(document, "statement")
    if document.get("_type") != STATEMENT_TYPE:
        raise ValueError(f"_type is {document.get('_type')!r}, expected {STATEMENT_TYPE!r}")
    if document.get("predicateType") != PREDICATE_TYPE:
        raise ValueError(f"predicateType is {document.get('predicateType')!r}, expected {PREDICATE_TYPE!r}")
    subjects = []
    for index, raw in enumerate(_field(document, "subject", list)):
        raw = _obj(raw, f"subject[{index}]")
        digest = _field(raw, "digest", dict)
        if not digest or not all(isinstance(v, str) for v in digest.values()):
            raise ValueError(f"subject[{index}].digest must map algorithms to hex strings")
        subjects.append(
            Subject(_field(raw, "name", str), tuple(sorted((k, v.lower()) for k, v in digest.items())))
        )
    predicate = _field(document, "predicate", dict)
    run = _field(predicate, "run", dict)
    commit = _field(run, "commit", str).lower()
    if not any(s.digest_of("gitCommit") == commit for s in subjects):
        raise ValueError("predicate.run.commit is not the gitCommit digest of any subject")
    issued_text = _field(run, "issued_at", str)
    try:
        issued_at = datetime.fromisoformat(issued_text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"issued_at {issued_text!r} is not an RFC 3339 time") from None
    if issued_at.tzinfo is None:
        raise ValueError(f"issued_at {issued_text!r} has no time zone")
    try:
        issued_at = issued_at.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"issued_at {issued_text!r} is out of range") from None
    status = _field(_field(predicate, "signature", dict), "status", str)
    try:
        signature_status = SignatureStatus(status)
    except ValueError:
        raise ValueError(f"signature status {status!r} is neither signed nor unsigned") from None
    return ReportClaims(
        subjects=tuple(subjects),
        verdict=_field(predicate, "verdict", str),
        repo=_field(run, "repo", str),
        repo_id=_field(run, "repo_id", str, optional=True),
        commit=commit,
        pr=_field(run, "pr", int, optional=True),
        event=_field(run, "event", str, optional=True),
        run_id=_field(run, "run_id", str, optional=True),
        run_attempt=_field(run, "run_attempt", int, optional=True),
        job=_field(run, "job", str, optional=True),
        issued_at=issued_at,
        nonce=_field(run, "nonce", str),
        signature_status=signature_status,
        tool_version=_field(_field(predicate, "tool", dict), "version", str),
        sources=_sources(run),
    )


def _sources(run: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    raw = _field(run, "sources", dict, optional=True) or {}
    known = {source.value for source in Source}
    for name, source in raw.items():
        if source not in known:
            raise ValueError(f"run.sources.{name} is {source!r}, not one of {', '.join(sorted(known))}")
    return tuple(sorted(raw.items()))


def _obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be an object")
    return value


def _field(obj: dict[str, Any], key: str, kind: type, *, optional: bool = False) -> Any:
    value = obj.get(key)
    if value is None and optional:
        return None
    if value is None:
        raise ValueError(f"field {key!r} is missing")
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"field {key!r} must be of type {kind.__name__}")
    return value


__all__ = [
    "AllOf",
    "ArtifactDigest",
    "Check",
    "CheckKind",
    "CheckResult",
    "CommitIs",
    "MalformedStatementError",
    "MaxAge",
    "RepoIdIs",
    "RepoIs",
    "ReportClaims",
    "Subject",
    "VerifyExit",
    "VerifyOutcome",
    "format_duration",
    "parse_duration",
    "parse_statement",
    "verify_report",
]
