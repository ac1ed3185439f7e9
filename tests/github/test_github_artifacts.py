"""Finding, downloading and safely unpacking the baseline artifact, against the fake API."""

from __future__ import annotations

import io
import stat
import warnings
import zipfile
from pathlib import Path

import pytest

from gpuemu_ci.github.artifacts import (
    Artifact,
    ArtifactError,
    ArtifactExpiredError,
    ArtifactTooLargeError,
    MatchKind,
    UnsafeArtifactError,
    download_artifact,
    extract_zip_safely,
    fetch_baseline,
    find_baseline_artifact,
    find_run_artifact,
)
from gpuemu_ci.github.client import GitHubClient
from gpuemu_ci.github.context import ActionContext, EventKind
from tests.github.support_fake_api import Failure, FakeGitHub, SleepRecorder, make_zip

BASE = "b" * 40
OLDER = "0" * 39 + "1"
NEWER = "e" * 40


def pr_context(
    fake: FakeGitHub, *, base_sha: str | None = BASE, base_ref: str | None = "main"
) -> ActionContext:
    return ActionContext(
        repository=fake.repository,
        event_name="pull_request",
        event=EventKind.PULL_REQUEST,
        sha="f" * 40,
        ref="refs/pull/1/merge",
        server_url="https://github.example",
        api_url=fake.api_url,
        repository_id=fake.repository_id,
        pr_number=1,
        base_ref=base_ref,
        base_sha=base_sha,
    )


def baseline(fake: FakeGitHub, sha: str, *, event: str = "push", branch: str = "main", **kw: object) -> dict:
    run = fake.add_run(event=event, head_branch=branch, head_sha=sha, **kw)  # type: ignore[arg-type]
    return fake.add_artifact(run, files={"results.json": f'{{"sha": "{sha}"}}'.encode()})


def test_prefers_the_base_commit_over_a_newer_baseline(fake_github: FakeGitHub, client: GitHubClient) -> None:
    exact = baseline(fake_github, BASE)
    baseline(fake_github, NEWER)  # landed on main after the PR branched
    match = find_baseline_artifact(client, pr_context(fake_github))
    assert match.kind is MatchKind.EXACT and match.label == "exact"
    assert match.artifact is not None and match.artifact.id == exact["id"]
    assert match.sha == BASE and match.run_event == "push"
    assert "base commit" in match.reason


def test_falls_back_to_the_newest_on_the_branch_and_says_so(
    fake_github: FakeGitHub, client: GitHubClient
) -> None:
    baseline(fake_github, OLDER)
    newest = baseline(fake_github, NEWER, event="schedule")
    match = find_baseline_artifact(client, pr_context(fake_github))
    assert match.kind is MatchKind.LATEST
    assert match.artifact is not None and match.artifact.id == newest["id"]
    assert f"no baseline for the base commit {BASE[:7]}" in match.reason
    assert "counted in this diff" in match.reason


def test_a_listed_ancestor_beats_a_newer_unrelated_baseline(
    fake_github: FakeGitHub, client: GitHubClient
) -> None:
    ancestor = baseline(fake_github, OLDER)
    baseline(fake_github, NEWER)
    match = find_baseline_artifact(client, pr_context(fake_github), ancestor_shas=["c" * 40, OLDER])
    assert match.kind is MatchKind.ANCESTOR and match.label == "ancestor:2"
    assert match.artifact is not None and match.artifact.id == ancestor["id"]


def test_base_sha_argument_overrides_the_payload(fake_github: FakeGitHub, client: GitHubClient) -> None:
    baseline(fake_github, BASE)
    merge_parent = baseline(fake_github, OLDER)
    match = find_baseline_artifact(client, pr_context(fake_github), base_sha=OLDER)
    assert match.kind is MatchKind.EXACT
    assert match.artifact is not None and match.artifact.id == merge_parent["id"]


def test_ignores_forks_other_branches_other_events_and_other_names(
    fake_github: FakeGitHub, client: GitHubClient
) -> None:
    baseline(fake_github, BASE, head_repository="mallory/kernels")  # a fork's own "main"
    baseline(fake_github, BASE, branch="feature")
    baseline(fake_github, BASE, event="pull_request")
    baseline(fake_github, BASE, event="workflow_dispatch")
    run = fake_github.add_run(event="push", head_branch="main", head_sha=BASE)
    fake_github.add_artifact(run, name="gpuemu-baseline-old")
    match = find_baseline_artifact(client, pr_context(fake_github))
    assert match.kind is MatchKind.NONE and match.artifact is None
    assert "run the baseline workflow on 'main'" in match.reason


def test_expired_baselines_are_skipped_and_counted(fake_github: FakeGitHub, client: GitHubClient) -> None:
    run = fake_github.add_run(event="push", head_branch="main", head_sha=BASE)
    fake_github.add_artifact(run, expired=True)
    match = find_baseline_artifact(client, pr_context(fake_github))
    assert match.kind is MatchKind.NONE
    assert match.expired_skipped == 1 and "(1 expired)" in match.reason


def test_no_base_branch_means_no_baseline(fake_github: FakeGitHub, client: GitHubClient) -> None:
    match = find_baseline_artifact(client, pr_context(fake_github, base_ref=None))
    assert match.kind is MatchKind.NONE
    assert fake_github.requests == []


def test_schedule_without_a_commit_takes_the_newest(fake_github: FakeGitHub, client: GitHubClient) -> None:
    baseline(fake_github, OLDER)
    newest = baseline(fake_github, NEWER)
    match = find_baseline_artifact(client, pr_context(fake_github, base_sha=None))
    assert match.kind is MatchKind.LATEST
    assert match.artifact is not None and match.artifact.id == newest["id"]


def test_lookup_failure_is_unavailable_not_an_exception(
    fake_github: FakeGitHub, client: GitHubClient
) -> None:
    fake_github.fail("GET", "/actions/artifacts$", Failure.read_only())
    match = find_baseline_artifact(client, pr_context(fake_github))
    assert match.kind is MatchKind.UNAVAILABLE
    assert "Resource not accessible by integration" in match.reason


def test_listing_is_retried_through_rate_limits(
    fake_github: FakeGitHub, client: GitHubClient, sleeps: SleepRecorder
) -> None:
    baseline(fake_github, BASE)
    fake_github.fail("GET", "/actions/artifacts$", Failure.too_many_requests(retry_after=3))
    fake_github.fail("GET", r"/actions/runs/\d+$", Failure.server_error(502))
    match = find_baseline_artifact(client, pr_context(fake_github))
    assert match.kind is MatchKind.EXACT
    assert sleeps.waits == [3.0, 1.0]


def test_download_unpacks_the_files(fake_github: FakeGitHub, client: GitHubClient, tmp_path: Path) -> None:
    run = fake_github.add_run(event="push", head_branch="main", head_sha=BASE)
    files = {"results.json": b'{"verdict": "passed"}', "snapshots/case-1.npz": b"\x93NUMPY"}
    raw = fake_github.add_artifact(run, files=files)
    artifact = Artifact.from_api(raw)
    assert artifact is not None
    out = download_artifact(client, artifact, tmp_path / "baseline")
    assert (out / "results.json").read_bytes() == files["results.json"]
    assert (out / "snapshots" / "case-1.npz").read_bytes() == files["snapshots/case-1.npz"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["baseline"]  # no temporary files left
    assert "authorization" not in fake_github.storage_requests[0].headers


def test_artifact_expiring_after_listing_gives_expired(
    fake_github: FakeGitHub, client: GitHubClient, tmp_path: Path
) -> None:
    raw = baseline(fake_github, BASE)
    artifact = Artifact.from_api(raw)
    assert artifact is not None
    fake_github.expire(raw)
    with pytest.raises(ArtifactExpiredError, match="expired"):
        download_artifact(client, artifact, tmp_path / "baseline")
    assert not (tmp_path / "baseline").exists()


def test_fetch_baseline_turns_expiry_into_a_none_match(
    fake_github: FakeGitHub, client: GitHubClient, tmp_path: Path
) -> None:
    baseline(fake_github, BASE)
    fake_github.fail("GET", r"/zip$", Failure.gone())
    fetched = fetch_baseline(client, pr_context(fake_github), tmp_path / "baseline")
    assert fetched.directory is None
    assert fetched.match.kind is MatchKind.NONE and "expired" in fetched.match.reason


def test_fetch_baseline_downloads_the_match(
    fake_github: FakeGitHub, client: GitHubClient, tmp_path: Path
) -> None:
    baseline(fake_github, BASE)
    fetched = fetch_baseline(client, pr_context(fake_github), tmp_path / "baseline")
    assert fetched.match.kind is MatchKind.EXACT
    assert fetched.directory is not None
    assert (fetched.directory / "results.json").read_text() == f'{{"sha": "{BASE}"}}'


def test_artifact_larger_than_the_cap_is_not_downloaded(
    fake_github: FakeGitHub, client: GitHubClient, tmp_path: Path
) -> None:
    run = fake_github.add_run(event="push", head_branch="main", head_sha=BASE)
    artifact = Artifact.from_api(fake_github.add_artifact(run, size_in_bytes=10_000_000))
    assert artifact is not None
    with pytest.raises(ArtifactTooLargeError):
        download_artifact(client, artifact, tmp_path / "baseline", max_bytes=1_000_000)
    assert fake_github.requests == []


def test_destination_must_be_empty(fake_github: FakeGitHub, client: GitHubClient, tmp_path: Path) -> None:
    raw = baseline(fake_github, BASE)
    (tmp_path / "baseline").mkdir()
    (tmp_path / "baseline" / "keep.txt").write_text("mine")
    with pytest.raises(ArtifactError, match="not an empty directory"):
        download_artifact(client, Artifact.from_api(raw), tmp_path / "baseline")  # type: ignore[arg-type]
    assert (tmp_path / "baseline" / "keep.txt").read_text() == "mine"


def test_find_run_artifact(fake_github: FakeGitHub, client: GitHubClient) -> None:
    run = fake_github.add_run(event="pull_request", head_branch="feature", head_sha="a" * 40)
    wanted = fake_github.add_artifact(run, name="gpuemu-report")
    fake_github.add_artifact(run, name="other")
    found = find_run_artifact(client, fake_github.repository, run["id"], "gpuemu-report")
    assert found is not None and found.id == wanted["id"]
    assert find_run_artifact(client, fake_github.repository, run["id"], "missing") is None


# -- zip safety -----------------------------------------------------------------------------


def zip_with(entries: list[tuple[zipfile.ZipInfo | str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        warnings.simplefilter("ignore", UserWarning)  # duplicate names are the point of one test
        for info, data in entries:
            archive.writestr(info, data)
    return buffer.getvalue()


def symlink_entry(name: str, target: str) -> tuple[zipfile.ZipInfo, bytes]:
    info = zipfile.ZipInfo(name)
    info.create_system = 3  # unix
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info, target.encode()


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([("../escape.txt", b"x")], "climbs out"),
        ([("a/../../escape.txt", b"x")], "climbs out"),
        ([("/etc/passwd", b"x")], "absolute path"),
        ([("C:/windows/x", b"x")], "absolute path"),
        ([("dir\\..\\x", b"x")], "forbidden character"),
        ([symlink_entry("link", "/etc/passwd")], "is a symlink"),
        ([("same.txt", b"1"), ("same.txt", b"2")], "appears twice"),
        ([("a", b"file"), ("a/b", b"under a file")], "clashes"),
        ([("a/", b""), ("a", b"file over a dir")], "appears twice"),
    ],
)
def test_unsafe_archives_are_refused(
    tmp_path: Path, entries: list[tuple[zipfile.ZipInfo | str, bytes]], message: str
) -> None:
    archive = tmp_path / "a.zip"
    archive.write_bytes(zip_with(entries))
    with pytest.raises(UnsafeArtifactError, match=message):
        extract_zip_safely(archive, tmp_path / "out", max_total_bytes=1 << 20, max_file_bytes=1 << 20)
    assert not (tmp_path / "escape.txt").exists()
    assert not (tmp_path.parent / "escape.txt").exists()


def test_unsafe_artifact_download_leaves_nothing_behind(
    fake_github: FakeGitHub, client: GitHubClient, tmp_path: Path
) -> None:
    run = fake_github.add_run(event="push", head_branch="main", head_sha=BASE)
    evil = zip_with([("ok.txt", b"fine"), ("../../evil.txt", b"x")])
    artifact = Artifact.from_api(fake_github.add_artifact(run, zip_bytes=evil))
    with pytest.raises(UnsafeArtifactError):
        download_artifact(client, artifact, tmp_path / "baseline")  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_zip_bomb_is_stopped_by_the_bytes_actually_unpacked(tmp_path: Path) -> None:
    archive = tmp_path / "bomb.zip"
    archive.write_bytes(make_zip({"zeros.bin": bytes(5_000_000)}))
    assert archive.stat().st_size < 20_000  # tiny on the wire
    with pytest.raises(ArtifactTooLargeError, match="per-file cap"):
        extract_zip_safely(archive, tmp_path / "out", max_total_bytes=10_000_000, max_file_bytes=1_000_000)


def test_total_size_cap_across_files(tmp_path: Path) -> None:
    archive = tmp_path / "many.zip"
    archive.write_bytes(make_zip({f"f{i}.bin": bytes(400) for i in range(5)}))
    with pytest.raises(ArtifactTooLargeError, match="total cap"):
        extract_zip_safely(archive, tmp_path / "out", max_total_bytes=1000, max_file_bytes=1000)


def test_entry_count_cap(tmp_path: Path) -> None:
    archive = tmp_path / "many.zip"
    archive.write_bytes(make_zip({f"f{i}": b"" for i in range(6)}))
    with pytest.raises(ArtifactTooLargeError, match="6 entries"):
        extract_zip_safely(
            archive, tmp_path / "out", max_total_bytes=1000, max_file_bytes=1000, max_entries=5
        )


def test_not_a_zip(tmp_path: Path) -> None:
    archive = tmp_path / "x.zip"
    archive.write_bytes(b"<html>error page</html>")
    with pytest.raises(UnsafeArtifactError, match="not a readable zip"):
        extract_zip_safely(archive, tmp_path / "out", max_total_bytes=1000, max_file_bytes=1000)


def test_directories_and_dot_segments_are_fine(tmp_path: Path) -> None:
    archive = tmp_path / "ok.zip"
    archive.write_bytes(zip_with([("dir/", b""), ("./dir/./a.txt", b"A")]))
    written = extract_zip_safely(archive, tmp_path / "out", max_total_bytes=1000, max_file_bytes=1000)
    assert written == [(tmp_path / "out" / "dir" / "a.txt").resolve()]
    assert written[0].read_bytes() == b"A"
