"""Baselines: what a later run is compared with, and the comparison itself.

A baseline is a results document of a run on the target branch, with its failure records dropped
(`baseline_of`): per op x dtype status, worst headroom and case counts; per kernel x arch resource metrics
and toolchain identity; the seed, suite, config hash, tool and generator versions and the commit. A plain
results.json works as a baseline too.

A missing or unreadable baseline is never fatal and never a silent "no regressions": the diff says so
plainly (with how to create one) and the run's own verdict decides."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import msgspec

from gpuemu_ci.config.model import Policies
from gpuemu_ci.diff.classify import baseline_info, compare
from gpuemu_ci.errors import UsageError
from gpuemu_ci.results.codec import from_json, read_results
from gpuemu_ci.results.diff import BaselineDiff, BaselineProvenance, DiffStatus
from gpuemu_ci.results.model import Results

HOW_TO_SEED = (
    "Create one from a run on the target branch: `gpuemu-ci run --out gpuemu-out` then "
    "`gpuemu-ci baseline create --from gpuemu-out/results.json -o baseline.json` (the GitHub Action's "
    "`baseline` mode does this on pushes and uploads it as the gpuemu-baseline artifact)."
)


class BaselineError(UsageError):
    """A baseline cannot be used. `status` says whether it is missing or bad."""

    def __init__(self, detail: str, *, status: DiffStatus = DiffStatus.UNREADABLE) -> None:
        super().__init__(f"baseline {detail}")
        self.status = status
        self.detail = detail  # the message without the role ("x.json does not exist")


@dataclass(frozen=True)
class BaselineSource:
    """Where the gate's baseline comes from: a file, or the reason there is none (no artifact, no token)."""

    path: Path | None = None
    shown_as: str | None = None  # the path as the user gave it (default: `path`)
    provenance: BaselineProvenance | None = None
    missing: str | None = None  # why there is no baseline file at all, and how to get one: the diff says so
    # The file, read already (the Action reads it before code under test runs, which could replace it): the
    # document, or why it cannot be used.
    document: Results | None = None
    unusable: BaselineError | None = None

    def read_with(self, read: Callable[[Path], bytes]) -> BaselineSource:
        """This source with its file read now by `read` (which raises a UsageError for a file it refuses)."""
        if self.path is None or self.document is not None or self.unusable is not None:
            return self
        try:
            return replace(self, document=baseline_from_bytes(read(self.path), self.path))
        except BaselineError as exc:
            return replace(self, unusable=exc)
        except UsageError as exc:
            status = DiffStatus.NO_BASELINE if getattr(exc, "missing", False) else DiffStatus.UNREADABLE
            return replace(self, unusable=BaselineError(exc.message, status=status))


TAGS_DIR = Path(".gpuemu") / "baselines"  # beside gpuemu.toml (upstream's `init` makes and ignores .gpuemu/)
_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")


def tagged_baseline(root: Path, tag: str) -> Path:
    """Where upstream's `baseline TAG` keeps a baseline: .gpuemu/baselines/TAG.json under `root`."""
    if not _TAG.match(tag) or ".." in tag:
        raise UsageError(
            f"baseline tag {tag!r}: use letters, digits, '.', '_', '+' and '-' (like v1.0 or main)"
        )
    return root / TAGS_DIR / f"{tag}.json"


def save_tagged(source: Path, target: Path) -> Results:
    """The baseline of the results in `source`, written to `target` (its directory made); returned."""
    from gpuemu_ci.files import atomic_write
    from gpuemu_ci.results.codec import to_json

    baseline = baseline_of(read_results(source))
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, to_json(baseline))
    return baseline


def baseline_of(results: Results) -> Results:
    """The document trimmed to what a later run is compared on: no failure records, no diff."""
    ops = tuple(msgspec.structs.replace(op, failures=(), failures_omitted=0) for op in results.ops)
    return msgspec.structs.replace(results, ops=ops, diff=None)


def load_baseline(path: Path) -> Results:
    """A results.json or baseline.json from disk. Raises BaselineError (NO_BASELINE when it does not exist)."""
    if not path.exists():
        raise BaselineError(f"{path} does not exist", status=DiffStatus.NO_BASELINE)
    if path.is_dir():
        raise BaselineError(f"{path} is a directory, not a results.json or baseline.json")
    try:
        return read_results(path, "baseline", quote_values=False)
    except UsageError as exc:
        raise BaselineError(f"{path} is not usable: {exc.message}") from None


def baseline_from_bytes(data: bytes, path: Path) -> Results:
    """The baseline document in `data` (read from `path`). Its errors name where it is wrong, never what it
    holds: the message is published (the pull request's comment), and the bytes are the file's whoever wrote it."""
    try:
        return from_json(data, source=f"baseline {path}", quote_values=False)
    except UsageError as exc:
        raise BaselineError(f"{path} is not usable: {exc.message}") from None


def diff_against(
    source: BaselineSource, current: Results, policies: Policies, fail_on_regression: bool
) -> BaselineDiff:
    """The comparison of `current` with the baseline `source` names (a neutral diff when there is none)."""
    if source.unusable is not None:
        return _neutral(source.unusable.status, source.unusable.detail, fail_on_regression)
    if source.path is None:
        message = (
            f"no baseline: {source.missing or 'none given'} No regression check was done; gating on this "
            "run's own verdicts only."
        )
        return BaselineDiff(
            status=DiffStatus.NO_BASELINE, message=message, fail_on_regression=fail_on_regression
        )
    try:
        base = source.document if source.document is not None else load_baseline(source.path)
    except BaselineError as exc:
        return _neutral(exc.status, exc.detail, fail_on_regression)
    shown = source.shown_as or str(source.path)
    return compare(
        base,
        current,
        policies,
        fail_on_regression=fail_on_regression,
        info=baseline_info(base, shown, source.provenance),
    )


def _neutral(status: DiffStatus, detail: str, fail_on_regression: bool) -> BaselineDiff:
    if status is DiffStatus.NO_BASELINE:
        message = (
            f"no baseline: {detail} (a first run, or the baseline expired). No regression "
            f"check was done; gating on this run's own verdicts only. {HOW_TO_SEED}"
        )
    else:
        message = (
            f"baseline unreadable: {detail}. No regression check was done; gating on this "
            f"run's own verdicts only. Recreate it with `gpuemu-ci baseline create`."
        )
    return BaselineDiff(status=status, message=message, fail_on_regression=fail_on_regression)
