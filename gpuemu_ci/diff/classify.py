"""Baseline vs current run -> BaselineDiff: op and kernel entries plus the run-level changes that explain
them (config, seed, suite, tool, generator, toolchain)."""

from __future__ import annotations

from typing import Any

from gpuemu_ci.config.model import Policies
from gpuemu_ci.diff.kernels import diff_kernels
from gpuemu_ci.diff.model import (
    SEVERITY_ORDER,
    BaselineDiff,
    BaselineInfo,
    DiffEntry,
    DiffStatus,
    Reason,
)
from gpuemu_ci.diff.ops import diff_ops
from gpuemu_ci.diff.snapshot import Snapshot


def compare(
    base: Snapshot, current: Snapshot, policies: Policies, *, fail_on_regression: bool, info: BaselineInfo
) -> BaselineDiff:
    """Classifies every op x dtype and kernel x arch of both runs. Entries are ordered failures first,
    then warnings, then the rest, each group in run order."""
    entries = [*diff_ops(base, current, policies.warn_threshold), *diff_kernels(base, current, policies)]
    ordered = tuple(sorted(entries, key=lambda e: SEVERITY_ORDER[e.severity]))  # stable: keeps run order
    notes = tuple(run_notes(base, current))
    return BaselineDiff(
        status=DiffStatus.COMPARED,
        message=_message(info, notes, ordered),
        baseline=info,
        entries=ordered,
        notes=notes,
        fail_on_regression=fail_on_regression,
    )


def run_notes(base: Snapshot, current: Snapshot) -> list[Reason]:
    """What differs between the two runs as a whole. Shown, never a regression by itself."""
    notes = []

    def note(metric: str, old: Any, new: Any, message: str) -> None:
        if old != new:
            notes.append(Reason(metric, old, new, message))

    note(
        "config_sha256",
        base.config_sha256,
        current.config_sha256,
        f"gpuemu.toml changed (sha256 {_short(base.config_sha256)} -> {_short(current.config_sha256)})",
    )
    note(
        "generator_version",
        base.generator_version,
        current.generator_version,
        f"fuzz generator version {base.generator_version} -> {current.generator_version}: the cases differ, "
        "so op changes are shown as toolchain_changed and not counted",
    )
    note(
        "seed",
        base.seed,
        current.seed,
        f"master seed {base.seed} -> {current.seed}: the cases differ, so "
        "headroom growth is not attributed to the code",
    )
    note(
        "suite",
        base.suite,
        current.suite,
        f"suite {base.suite} -> {current.suite}: the dtypes and case counts differ",
    )
    note(
        "tool_version",
        base.tool_version,
        current.tool_version,
        f"gpuemu-ci {base.tool_version} -> {current.tool_version}",
    )
    old_tools, new_tools = base.toolchain or {}, current.toolchain or {}
    if base.kernels and current.kernels:
        for key in ("nvcc", "ptxas", "sass_tool"):
            note(
                f"toolchain.{key}",
                old_tools.get(key),
                new_tools.get(key),
                f"{key} {old_tools.get(key) or 'none'} -> {new_tools.get(key) or 'none'}: kernel metrics "
                "are compared only where the toolchain matches",
            )
    if base.cut_short:
        notes.append(
            Reason(
                "baseline_cut_short",
                True,
                None,
                "the baseline run was cut short by its timeout: what it did not reach shows up as new",
            )
        )
    if current.cut_short:
        notes.append(
            Reason(
                "cut_short",
                None,
                True,
                "this run was cut short by its timeout: what it did not reach shows up as removed",
            )
        )
    if base.verdict not in (None, "passed"):
        notes.append(
            Reason(
                "baseline_verdict",
                base.verdict,
                None,
                f"the baseline run itself was {base.verdict}: what failed there cannot regress here",
            )
        )
    return notes


def baseline_info(
    base: Snapshot, source: str, path: str, provenance: dict[str, Any] | None = None
) -> BaselineInfo:
    return BaselineInfo(
        source=source,
        path=path,
        commit=base.commit,
        ref=base.ref,
        created_at=base.created_at,
        tool_version=base.tool_version,
        generator_version=base.generator_version,
        config_sha256=base.config_sha256,
        seed=base.seed,
        suite=base.suite,
        verdict=base.verdict,
        cut_short=base.cut_short,
        ci=base.ci,
        provenance=provenance,
    )


def _message(info: BaselineInfo, notes: tuple[Reason, ...], entries: tuple[DiffEntry, ...]) -> str:
    where = f"commit {info.commit[:12]}" if info.commit else info.path
    text = f"compared with the baseline from {where}"
    if info.created_at:
        text += f" (created {info.created_at})"
    if notes:
        text += "; " + "; ".join(n.message for n in notes)
    if not entries:
        text += "; neither run has ops or kernels to compare"
    return text


def _short(sha: str | None) -> str:
    return sha[:12] if sha else "none"
