"""`gpuemu-ci run --baseline PATH` and `gpuemu-ci diff`: load the baseline, compare, fill `diff`, gate.

A missing or unreadable baseline is never fatal and never a silent "no regressions": the diff section says
so plainly (with how to create one) and the run's own verdict decides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuemu_ci.config.model import Policies
from gpuemu_ci.diff.baseline import BaselineError, load_snapshot, snapshot_of
from gpuemu_ci.diff.classify import baseline_info, compare
from gpuemu_ci.diff.fields import FormatError
from gpuemu_ci.diff.gate import fail_on_regression as effective_flag
from gpuemu_ci.diff.gate import gate_document
from gpuemu_ci.diff.model import BaselineDiff, DiffStatus
from gpuemu_ci.diff.snapshot import Snapshot

HOW_TO_SEED = (
    "Create one from a run on the target branch: `gpuemu-ci run --out gpuemu-out` then "
    "`gpuemu-ci baseline create --from gpuemu-out/results.json -o baseline.json` (the GitHub Action's "
    "`baseline` mode does this on pushes and uploads it as the gpuemu-baseline artifact)."
)


def apply_baseline(
    document: dict[str, Any],
    baseline_path: Path,
    policies: Policies,
    fail_on_regression: bool | None = None,
    *,
    provenance: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The document with its `diff` section filled; verdict "failed" and exit code 1 when a regression fails
    the gate. `provenance` (optional) records how the caller found the baseline, e.g. the Action's
    artifact match; it is copied into `diff.baseline.provenance`."""
    flag = effective_flag(policies, fail_on_regression)
    try:
        base, source = load_snapshot(Path(baseline_path))
    except BaselineError as exc:
        return gate_document(document, unavailable(exc, flag))
    try:
        current, _ = snapshot_of(document)
        diff = diff_snapshots(base, source, str(baseline_path), current, policies, flag, provenance)
    except FormatError as exc:
        diff = BaselineDiff(
            DiffStatus.UNREADABLE,
            f"the diff could not read this run's results ({exc}); gating on this run's own verdicts only",
            fail_on_regression=flag,
        )
    except Exception as exc:  # a bug in the diff must not throw away a finished run's results
        diff = BaselineDiff(
            DiffStatus.UNREADABLE,
            f"the baseline diff failed with an internal error "
            f"({type(exc).__name__}: {exc}; please report it); gating on this run's own "
            "verdicts only",
            fail_on_regression=flag,
        )
    return gate_document(document, diff)


def diff_snapshots(
    base: Snapshot,
    source: str,
    path: str,
    current: Snapshot,
    policies: Policies,
    fail_on_regression: bool,
    provenance: dict[str, Any] | None = None,
) -> BaselineDiff:
    return compare(
        base,
        current,
        policies,
        fail_on_regression=fail_on_regression,
        info=baseline_info(base, source, path, provenance),
    )


def unavailable(error: BaselineError, fail_on_regression: bool) -> BaselineDiff:
    """The diff section for a baseline that cannot be used."""
    if error.status is DiffStatus.NO_BASELINE:
        message = (
            f"no baseline: {error.detail} (a first run, or the baseline expired). No regression "
            f"check was done; gating on this run's own verdicts only. {HOW_TO_SEED}"
        )
    else:
        message = (
            f"baseline unreadable: {error.detail}. No regression check was done; gating on this "
            f"run's own verdicts only. Recreate it with `gpuemu-ci baseline create`."
        )
    return BaselineDiff(error.status, message, fail_on_regression=fail_on_regression)
