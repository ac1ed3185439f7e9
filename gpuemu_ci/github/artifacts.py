"""Find the base branch's baseline artifact, then download and unpack it safely.

The baseline is the ``gpuemu-baseline`` artifact that the baseline workflow uploads from
``push`` and ``schedule`` runs on the default branch. For a pull request the right one was built
from the PR's base commit; when that run has no artifact (docs-only push, expired, first run)
the newest one on the base branch is the fallback, and the match records which it was, so the
comment can warn that unrelated changes on the branch are counted in the diff.

Artifacts come from code that ran in CI, so a downloaded zip is unpacked by ``safezip``, which
refuses entries that could escape the target directory and caps the bytes actually unpacked.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from gpuemu_ci.github.client import (
    BodyCap,
    GitHubClient,
    GitHubDownloadTooLargeError,
    GitHubError,
    GitHubForbiddenError,
    GitHubGoneError,
    GitHubNetworkError,
    GitHubNotFoundError,
)
from gpuemu_ci.github.context import ActionContext
from gpuemu_ci.github.safezip import (
    DEFAULT_MAX_ENTRIES,
    ArtifactError,
    ArtifactTooLargeError,
    UnsafeArtifactError,
    extract_zip_safely,
)

__all__ = [
    "BASELINE_ARTIFACT",
    "Artifact",
    "ArtifactError",
    "ArtifactExpiredError",
    "ArtifactTooLargeError",
    "BaselineFetch",
    "BaselineMatch",
    "MatchKind",
    "UnsafeArtifactError",
    "download_artifact",
    "extract_zip_safely",
    "fetch_baseline",
    "find_baseline_artifact",
    "find_run_artifact",
]

BASELINE_ARTIFACT = "gpuemu-baseline"
BASELINE_EVENTS = frozenset({"push", "schedule"})
DEFAULT_MAX_BYTES = 100 * 1024 * 1024  # the download (its own, larger cap) and what it unpacks to
# 100 artifacts a page, each about a kilobyte of JSON.
ARTIFACTS_PAGE = BodyCap(8 << 20, "a page of the artifact list")


class ArtifactExpiredError(ArtifactError):
    """The artifact passed its retention period (GitHub answers 410 Gone)."""


class MatchKind(Enum):
    """How the baseline relates to the commit this run compares against."""

    EXACT = "exact"  # built from the base commit itself
    ANCESTOR = "ancestor"  # built from a first-parent ancestor of the base commit
    LATEST = "latest"  # the newest on the base branch, commit unrelated or unknown
    NONE = "none"  # no usable artifact: first run, all expired, no base branch
    UNAVAILABLE = "unavailable"  # the lookup itself failed (permissions, network)


@dataclass(frozen=True)
class Artifact:
    """The fields of a GitHub artifact object that gpuemu-ci uses."""

    id: int
    name: str
    size_in_bytes: int
    expired: bool
    archive_download_url: str
    created_at: str | None = None
    expires_at: str | None = None
    digest: str | None = None
    run_id: int | None = None
    head_sha: str | None = None
    head_branch: str | None = None
    repository_id: int | None = None
    head_repository_id: int | None = None

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> Artifact | None:
        """Parse an API artifact object; None when a required field is missing or mistyped."""
        linked = data.get("workflow_run")
        run: Mapping[str, Any] = linked if isinstance(linked, dict) else {}
        try:
            return cls(
                id=_req(data, "id", int),
                name=_req(data, "name", str),
                size_in_bytes=_req(data, "size_in_bytes", int),
                expired=_req(data, "expired", bool),
                archive_download_url=_req(data, "archive_download_url", str),
                created_at=_opt(data, "created_at", str),
                expires_at=_opt(data, "expires_at", str),
                digest=_opt(data, "digest", str),
                run_id=_opt(run, "id", int),
                head_sha=_opt(run, "head_sha", str),
                head_branch=_opt(run, "head_branch", str),
                repository_id=_opt(run, "repository_id", int),
                head_repository_id=_opt(run, "head_repository_id", int),
            )
        except (KeyError, TypeError):
            return None


@dataclass(frozen=True)
class BaselineMatch:
    """The outcome of the baseline search; ``reason`` is one sentence for people."""

    kind: MatchKind
    reason: str
    artifact: Artifact | None = None
    base_ref: str | None = None
    wanted_sha: str | None = None
    distance: int | None = None
    run_event: str | None = None
    expired_skipped: int = 0
    # For UNAVAILABLE: "network" (GitHub could not be reached), "forbidden" (403/404: usually a missing
    # `actions: read`), "api" (any other answer) or "artifact" (the download could not be unpacked).
    cause: str | None = None

    @property
    def label(self) -> str:
        """``exact``, ``ancestor:<k>``, ``latest``, ``none`` or ``unavailable`` (for reports)."""
        if self.kind is MatchKind.ANCESTOR:
            return f"ancestor:{self.distance}"
        return str(self.kind.value)

    @property
    def found(self) -> bool:
        """True when an artifact was matched."""
        return self.artifact is not None

    @property
    def sha(self) -> str | None:
        """The commit the baseline was built from."""
        return self.artifact.head_sha if self.artifact else None

    @property
    def run_id(self) -> int | None:
        """The workflow run that uploaded the baseline."""
        return self.artifact.run_id if self.artifact else None


@dataclass(frozen=True)
class BaselineFetch:
    """``fetch_baseline``'s result: the match and, when downloaded, the unpacked directory."""

    match: BaselineMatch
    directory: Path | None = None


def find_baseline_artifact(
    client: GitHubClient,
    ctx: ActionContext,
    name: str = BASELINE_ARTIFACT,
    *,
    base_sha: str | None = None,
    ancestor_shas: Sequence[str] = (),
    events: Iterable[str] = BASELINE_EVENTS,
    max_pages: int = 10,
    max_run_checks: int = 10,
) -> BaselineMatch:
    """Find the newest unexpired ``name`` artifact from a push/schedule run of this repository
    on ``ctx.base_ref``, preferring one built from the base commit.

    ``base_sha`` overrides ``ctx.base_sha`` (the entrypoint may pass ``HEAD^1`` of the merge
    commit); ``ancestor_shas`` lists first-parent ancestors of it, nearest first, so that a close
    ancestor beats an unrelated newer build. Never raises for API failures: they give
    ``MatchKind.UNAVAILABLE`` with the reason.
    """
    wanted = base_sha or ctx.base_sha
    base_ref = ctx.base_ref
    if not base_ref:
        return BaselineMatch(MatchKind.NONE, "this run has no base branch to compare with", wanted_sha=wanted)
    allowed_events = frozenset(events)
    try:
        candidates, expired = _candidates(client, ctx, name, base_ref, max_pages)
        rank = {sha: i for i, sha in enumerate([wanted, *ancestor_shas]) if sha}
        # Newest first, then stable-sorted by closeness to the wanted commit.
        candidates.sort(key=lambda a: (a.created_at or "", a.id), reverse=True)
        candidates.sort(key=lambda a: rank.get(a.head_sha or "", len(rank)))
        for artifact in candidates[:max_run_checks]:
            event = _run_event(client, ctx.repository, artifact.run_id)
            if event not in allowed_events:
                continue
            closeness = rank.get(artifact.head_sha or "")
            return _matched(artifact, closeness, event, base_ref, wanted, expired)
    except GitHubError as exc:
        return BaselineMatch(
            MatchKind.UNAVAILABLE,
            f"could not look up the baseline: {exc.message}",
            base_ref=base_ref,
            cause=failure_cause(exc),
        )
    reason = f"no unexpired {name!r} artifact from a push or scheduled run on {base_ref!r}"
    if expired:
        reason += f" ({expired} expired)"
    reason += f"; run the baseline workflow on {base_ref!r} to create one"
    return BaselineMatch(
        MatchKind.NONE, reason, base_ref=base_ref, wanted_sha=wanted, expired_skipped=expired
    )


def find_run_artifact(client: GitHubClient, repository: str, run_id: int, name: str) -> Artifact | None:
    """The unexpired artifact ``name`` of one run (for the ``workflow_run`` companion), or None."""
    items = client.paginate(
        f"/repos/{repository}/actions/runs/{run_id}/artifacts",
        {"name": name},
        item_key="artifacts",
        cap=ARTIFACTS_PAGE,
    )
    for item in items:
        artifact = Artifact.from_api(item)
        if artifact is not None and artifact.name == name and not artifact.expired:
            return artifact
    return None


def download_artifact(
    client: GitHubClient,
    artifact: Artifact,
    dest_dir: Path,
    max_bytes: int = DEFAULT_MAX_BYTES,
    *,
    max_file_bytes: int | None = None,
    max_entries: int = DEFAULT_MAX_ENTRIES,
) -> Path:
    """Download ``artifact`` and unpack it into ``dest_dir`` (absent or empty); return ``dest_dir``.

    ``max_bytes`` caps both the zip and the total unpacked size; ``max_file_bytes`` (default
    ``max_bytes``) caps each file. Nothing is left in ``dest_dir`` on failure. Raises
    ``ArtifactExpiredError``, ``ArtifactTooLargeError``, ``UnsafeArtifactError`` or another
    ``GitHubError``.
    """
    label = f"artifact {artifact.name!r} ({artifact.id})"
    if artifact.expired:
        raise ArtifactExpiredError(f"{label} has expired")
    if artifact.size_in_bytes > max_bytes:
        raise ArtifactTooLargeError(
            f"{label} is {artifact.size_in_bytes:,} bytes, over the {max_bytes:,} cap"
        )
    if dest_dir.exists() and (not dest_dir.is_dir() or any(dest_dir.iterdir())):
        raise ArtifactError(f"cannot unpack {label}: {dest_dir} exists and is not an empty directory")
    dest_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".gpuemu-artifact-", dir=dest_dir.parent))
    try:
        zip_path = work / "artifact.zip"
        try:
            client.download(artifact.archive_download_url, zip_path, max_bytes=max_bytes)
        except GitHubGoneError as exc:
            raise ArtifactExpiredError(f"{label} has expired (GitHub answered 410 Gone)") from exc
        except GitHubDownloadTooLargeError as exc:
            raise ArtifactTooLargeError(f"{label}: {exc.message}") from exc
        unpacked = work / "files"
        extract_zip_safely(
            zip_path,
            unpacked,
            max_total_bytes=max_bytes,
            max_file_bytes=max_file_bytes or max_bytes,
            max_entries=max_entries,
        )
        if dest_dir.exists():
            dest_dir.rmdir()
        unpacked.rename(dest_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest_dir


def fetch_baseline(
    client: GitHubClient,
    ctx: ActionContext,
    dest_dir: Path,
    name: str = BASELINE_ARTIFACT,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    base_sha: str | None = None,
    ancestor_shas: Sequence[str] = (),
) -> BaselineFetch:
    """Find and download the baseline in one step; every failure becomes the match's reason.

    An artifact that expires between listing and download gives ``MatchKind.NONE`` ("expired");
    a download or unpacking failure gives ``MatchKind.UNAVAILABLE``.
    """
    match = find_baseline_artifact(client, ctx, name, base_sha=base_sha, ancestor_shas=ancestor_shas)
    if match.artifact is None:
        return BaselineFetch(match)
    try:
        return BaselineFetch(match, download_artifact(client, match.artifact, dest_dir, max_bytes))
    except ArtifactExpiredError as exc:
        kind, reason = MatchKind.NONE, f"the baseline expired before it could be downloaded: {exc.message}"
    except (ArtifactError, GitHubError) as exc:
        kind, reason = MatchKind.UNAVAILABLE, f"could not download the baseline: {exc.message}"
        cause = failure_cause(exc) if isinstance(exc, GitHubError) else "artifact"
        return BaselineFetch(
            BaselineMatch(kind, reason, base_ref=match.base_ref, wanted_sha=match.wanted_sha, cause=cause)
        )
    return BaselineFetch(BaselineMatch(kind, reason, base_ref=match.base_ref, wanted_sha=match.wanted_sha))


def failure_cause(exc: GitHubError) -> str:
    """What kind of failure a lookup met: "network", "forbidden" or "api" (see BaselineMatch.cause)."""
    if isinstance(exc, GitHubNetworkError):
        return "network"
    if isinstance(exc, GitHubForbiddenError | GitHubNotFoundError):
        return "forbidden"
    return "api"


def _candidates(
    client: GitHubClient, ctx: ActionContext, name: str, base_ref: str, max_pages: int
) -> tuple[list[Artifact], int]:
    candidates: list[Artifact] = []
    expired = 0
    items = client.paginate(
        f"/repos/{ctx.repository}/actions/artifacts",
        {"name": name},
        item_key="artifacts",
        max_pages=max_pages,
        cap=ARTIFACTS_PAGE,
    )
    for item in items:
        artifact = Artifact.from_api(item)
        if artifact is None or artifact.name != name or artifact.head_branch != base_ref:
            continue
        # A fork's branch of the same name must never provide the baseline.
        if artifact.head_repository_id is None or artifact.head_repository_id != artifact.repository_id:
            continue
        if ctx.repository_id is not None and artifact.repository_id != ctx.repository_id:
            continue
        if artifact.expired:
            expired += 1
            continue
        candidates.append(artifact)
    return candidates, expired


def _run_event(client: GitHubClient, repository: str, run_id: int | None) -> str | None:
    # The artifact object lacks the run's event; only the run says whether it was a push.
    if run_id is None:
        return None
    try:
        run = client.get_json(f"/repos/{repository}/actions/runs/{run_id}")
    except GitHubNotFoundError:
        return None  # the run was deleted; its artifacts are going too
    event = run.get("event") if isinstance(run, dict) else None
    return event if isinstance(event, str) else None


def _matched(
    artifact: Artifact, closeness: int | None, event: str, base_ref: str, wanted: str | None, expired: int
) -> BaselineMatch:
    sha = (artifact.head_sha or "?")[:7]
    source = f"{event} run {artifact.run_id} at {sha}"
    if closeness == 0:
        kind, distance = MatchKind.EXACT, None
        reason = f"baseline from the base commit ({source})"
    elif closeness is not None:
        kind, distance = MatchKind.ANCESTOR, closeness
        reason = (
            f"baseline from {source}, {closeness} commit(s) before the base commit {(wanted or '?')[:7]}; "
            f"changes that landed on {base_ref} in between are counted in this diff"
        )
    elif wanted:
        kind, distance = MatchKind.LATEST, None
        reason = (
            f"no baseline for the base commit {wanted[:7]}; using the newest on {base_ref} ({source}); "
            f"changes that landed on {base_ref} in between are counted in this diff"
        )
    else:
        kind, distance = MatchKind.LATEST, None
        reason = f"the newest baseline on {base_ref} ({source})"
    return BaselineMatch(kind, reason, artifact, base_ref, wanted, distance, event, expired)


def _req(data: Mapping[str, Any], key: str, kind: type) -> Any:
    value = data[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(key)
    return value


def _opt(data: Mapping[str, Any], key: str, kind: type) -> Any:
    value = data.get(key)
    if value is None:
        return None
    return _req(data, key, kind)
