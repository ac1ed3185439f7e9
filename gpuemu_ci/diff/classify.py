"""Baseline vs current run -> BaselineDiff: op and kernel entries plus the run-level changes that explain
them (config, seed, suite, tool, generator, toolchain)."""

from __future__ import annotations

from typing import Any

from gpuemu_ci.config.model import Policies
from gpuemu_ci.diff.kernels import diff_kernels
from gpuemu_ci.diff.ops import diff_ops
from gpuemu_ci.results.diff import (
    BaselineDiff,
    BaselineInfo,
    BaselineProvenance,
    DiffEntry,
    DiffStatus,
    Reason,
)
from gpuemu_ci.results.model import Results, Verdict


def compare(
    base: Results, current: Results, policies: Policies, *, fail_on_regression: bool, info: BaselineInfo
) -> BaselineDiff:
    """Classifies every op x dtype and kernel x arch of both runs. Entries are ordered failures first,
    then warnings, then the rest, each group in run order (BaselineDiff orders them)."""
    entries = (
        *diff_ops(base, current, policies.headroom_growth_threshold),
        *diff_kernels(base, current, policies),
    )
    notes = tuple(run_notes(base, current))
    return BaselineDiff(
        status=DiffStatus.COMPARED,
        message=_message(info, notes, entries),
        baseline=info,
        entries=entries,
        notes=notes,
        fail_on_regression=fail_on_regression,
    )


def run_notes(base: Results, current: Results) -> list[Reason]:
    """What differs between the two runs as a whole. Shown, never a regression by itself."""
    notes = []

    def note(metric: str, old: Any, new: Any, message: str) -> None:
        if old != new:
            notes.append(Reason(metric, old, new, message))

    note(
        "config_sha256",
        base.config.sha256,
        current.config.sha256,
        f"gpuemu.toml changed (sha256 {_short(base.config.sha256)} -> {_short(current.config.sha256)})",
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
        base.tool.version,
        current.tool.version,
        f"gpuemu-ci {base.tool.version} -> {current.tool.version}",
    )
    old_tools, new_tools = base.lint.toolchain, current.lint.toolchain
    if base.kernels and current.kernels:
        for key in ("nvcc", "ptxas", "sass_tool"):
            old_value = getattr(old_tools, key) if old_tools else None
            new_value = getattr(new_tools, key) if new_tools else None
            note(
                f"toolchain.{key}",
                old_value,
                new_value,
                f"{key} {old_value or 'none'} -> {new_value or 'none'}: kernel metrics "
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
    if base.verdict is not Verdict.PASSED:
        notes.append(
            Reason(
                "baseline_verdict",
                base.verdict.value,
                None,
                f"the baseline run itself was {base.verdict.value}: what failed there cannot regress here",
            )
        )
    return notes


def baseline_info(base: Results, path: str, provenance: BaselineProvenance | None = None) -> BaselineInfo:
    """What the diff records about the baseline it compared with."""
    return BaselineInfo(
        path=path,
        commit=base.tested_commit,
        ref=base.git.ref if base.git else None,
        created_at=base.finished_at,
        tool_version=base.tool.version,
        generator_version=base.generator_version,
        config_sha256=base.config.sha256,
        seed=base.seed,
        suite=base.suite,
        verdict=base.verdict.value,
        cut_short=base.cut_short,
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
