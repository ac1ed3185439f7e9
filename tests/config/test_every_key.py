"""Every key, alias, invariant and execution mode of gpuemu.toml (gpuemu_ci/config/keys.py) does what it says or
is refused (issue 41): for each, a project that breaks it fails (or is refused, exit 2) and one that keeps it
passes. The pairs live in support_every_key.py; the first test fails when the table gains a key without one.

The ops and kernels of the pairs that need no table of their own run together, one run for those that must
pass and one for those that must fail (each judged on its own verdict); the rest run alone, or (policies)
through `gpuemu-ci diff` between two runs of one project whose sources changed."""

from __future__ import annotations

import hashlib
import json
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

from gpuemu_ci.config.keys import INVARIANTS, KEYS, MODES
from tests.config.support_every_key import (
    FILES,
    PAIRS,
    POLICY_FILES_AFTER,
    POLICY_FILES_BEFORE,
    Case,
    Outcome,
    Project,
    combine,
    project_text,
)
from tests.support_cli import CliResult, run_cli


def listed_names() -> set[str]:
    """What keys.py lists: each key and alias as `table.key`, each invariant, each execution mode."""
    names = {name for key in KEYS for name in key.names}
    return names | {f"invariant.{name}" for name in INVARIANTS} | {f"mode.{mode}" for mode in MODES}


def test_every_key_alias_invariant_and_mode_has_a_breaking_and_a_keeping_project() -> None:
    missing = sorted(listed_names() - set(PAIRS))
    assert not missing, f"keys.py lists these without a pair in tests/config/support_every_key.py: {missing}"
    assert not sorted(set(PAIRS) - listed_names()), "pairs for names keys.py does not list"
    for name, pair in PAIRS.items():
        assert pair.breaks.outcome is not Outcome.PASSES, name  # a pair must show the key can be broken
        assert pair.keeps.outcome in (Outcome.PASSES, Outcome.WARNS), name


@cache
def _available(need: str) -> bool:
    if need == "torch":
        return find_spec("torch") is not None
    from gpuemu_ci.lint.toolchain import discover_toolchain

    if need == "nvcc":
        return discover_toolchain().frontend is not None
    if need == "sass":
        return discover_toolchain().sass_tool is not None
    if need == "no-gpu":
        from gpuemu_ci.backends import detect_gpu

        return detect_gpu() is None
    raise AssertionError(need)


def _runnable(case: Case) -> bool:
    return all(_available(need) for need in case.project.needs)


def _skip_unless_runnable(case: Case) -> None:
    missing = [need for need in case.project.needs if not _available(need)]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}, which this machine lacks")


def write(root: Path, project: Project, files: dict[str, str] | None = None, **extra: Any) -> Path:
    for name, text in {**FILES, **(files or {})}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    config = root / "gpuemu.toml"
    config.write_text(project_text(project, **extra))
    return config


def run(config: Path, project: Project, out: Path) -> CliResult:
    return run_cli(["run", "--config", config, "--out", out, *project.args], env=dict(project.env))


def _results(out: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((out / "results.json").read_text(encoding="utf-8"))
    return document


# --- cases refused when the config is read --------------------------------------------------------------------
def _cases(outcome: Outcome) -> Iterator[Any]:
    for name, pair in PAIRS.items():
        for side, case in (("breaks", pair.breaks), ("keeps", pair.keeps)):
            if case.outcome is outcome:
                marks = [pytest.mark.slow] if "nvcc" in case.project.needs else []
                yield pytest.param(case, id=f"{name}-{side}", marks=marks)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(_cases(Outcome.REFUSED)))
def test_a_config_that_breaks_the_key_is_refused(case: Case, tmp_path: Path) -> None:
    _skip_unless_runnable(case)
    result = run(write(tmp_path, case.project), case.project, tmp_path / "out")
    assert result.code == 2, result.output
    assert case.says in result.stderr, result.stderr


# --- the shared projects: every op and kernel entry of the batchable pairs ---------------------------------------
@dataclass(frozen=True)
class Batch:
    result: CliResult
    results: dict[str, Any]


def _batch(side: str, kind: str, tmp: Path) -> Batch:
    cases = [
        case
        for pair in PAIRS.values()
        if (case := getattr(pair, side)).batchable
        and _runnable(case)
        and bool(case.project.kernels) == (kind == "kernels")
    ]
    project = combine([case.project for case in cases])
    extra = {"ci": {"allow_skips": "true"}}  # a launch or GPU op here is skipped, and judged on its own row
    result = run(write(tmp, project, extra_sections=extra), project, tmp / "out")
    assert result.code in (0, 1), result.output
    return Batch(result, _results(tmp / "out"))


@pytest.fixture(scope="module")
def batches(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Batch]:
    made: dict[tuple[str, str], Batch] = {}

    def get(side: str, kind: str) -> Batch:
        if (side, kind) not in made:
            made[side, kind] = _batch(side, kind, tmp_path_factory.mktemp(f"{side}-{kind}"))
        return made[side, kind]

    return _Lazy(get)


class _Lazy(dict[tuple[str, str], Batch]):
    """Runs a batch the first time a test asks for it."""

    def __init__(self, make: Any) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, key: tuple[str, str]) -> Batch:
        value: Batch = self._make(*key)
        self[key] = value
        return value


def _rows(results: dict[str, Any], target: str) -> list[dict[str, Any]]:
    return [op for op in results["ops"] if op["name"] == target] + [
        k for k in results["kernels"] if k["name"] == target
    ]


def _text(row: dict[str, Any]) -> str:
    return json.dumps(row)


def judge_row(case: Case, results: dict[str, Any]) -> None:
    assert case.target is not None
    rows = _rows(results, case.target)
    assert rows, f"{case.target} is not in the results"
    if case.outcome is Outcome.PASSES:
        for row in rows:
            skipped_here = (
                row["status"] == "skipped" and row.get("skip_reason") == "no GPU" and _available("no-gpu")
            )
            assert row["status"] == "passed" or skipped_here, _text(row)
    elif case.outcome is Outcome.SKIPPED:
        assert any(row["status"] == "skipped" and case.says in (row.get("skip_reason") or "") for row in rows)
    else:
        assert case.outcome is Outcome.FAILS
        assert any(row["status"] == "failed" for row in rows), [_text(r) for r in rows]
        assert any(case.says in _text(row) for row in rows), (case.says, [_text(r) for r in rows])


def _batch_params(side: str) -> Iterator[Any]:
    for name, pair in PAIRS.items():
        case = getattr(pair, side)
        if case.batchable:
            yield pytest.param(case, id=name)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(_batch_params("breaks")))
def test_an_op_or_kernel_that_breaks_the_key_fails(case: Case, batches: dict[tuple[str, str], Batch]) -> None:
    _skip_unless_runnable(case)
    judge_row(case, batches["breaks", "kernels" if case.project.kernels else "ops"].results)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(_batch_params("keeps")))
def test_an_op_or_kernel_that_keeps_the_key_passes(case: Case, batches: dict[tuple[str, str], Batch]) -> None:
    _skip_unless_runnable(case)
    judge_row(case, batches["keeps", "kernels" if case.project.kernels else "ops"].results)


# --- pairs that change a table of their own: each runs alone -----------------------------------------------------
def _own_params() -> Iterator[Any]:
    for name, pair in PAIRS.items():
        for side, case in (("breaks", pair.breaks), ("keeps", pair.keeps)):
            if (
                not case.batchable
                and case.outcome is not Outcome.REFUSED
                and "--diff" not in case.project.args
            ):
                yield pytest.param(case, id=f"{name}-{side}")


EXIT = {Outcome.PASSES: 0, Outcome.WARNS: 0, Outcome.FAILS: 1, Outcome.INCOMPLETE: 3}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(_own_params()))
def test_a_project_that_breaks_or_keeps_the_key(case: Case, tmp_path: Path) -> None:
    _skip_unless_runnable(case)
    result = run(write(tmp_path, case.project), case.project, tmp_path / "out")
    assert result.code == EXIT[case.outcome], result.output
    shown = result.stderr + (tmp_path / "out" / "results.json").read_text(encoding="utf-8")
    assert case.says in shown, result.stderr
    if case.outcome is Outcome.PASSES:
        assert "WARN" not in result.stderr, result.stderr


# --- policies: `gpuemu-ci diff` between a run before and a run after the sources grew ---------------------------
@pytest.fixture(scope="module")
def before_after(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    from tests.config.support_every_key import LENIENT, POLICY_KERNELS, POLICY_OPS

    root = tmp_path_factory.mktemp("policies")
    project = Project({"policies": LENIENT}, POLICY_OPS, POLICY_KERNELS)
    documents = []
    for label, files in (("before", POLICY_FILES_BEFORE), ("after", POLICY_FILES_AFTER)):
        config = write(root, project, files)
        result = run(config, project, root / label)
        assert result.code == 0, result.output
        documents.append(root / label / "results.json")
    return documents[0], documents[1], root


def _diff_params() -> Iterator[Any]:
    for name, pair in PAIRS.items():
        for side, case in (("breaks", pair.breaks), ("keeps", pair.keeps)):
            if "--diff" in case.project.args:
                yield pytest.param(case, id=f"{name}-{side}")


@pytest.mark.slow
@pytest.mark.parametrize("case", list(_diff_params()))
def test_a_policy_judged_against_a_baseline(case: Case, before_after: tuple[Path, Path, Path]) -> None:
    _skip_unless_runnable(case)
    before, after, root = before_after
    config = root / f"diff-{hashlib.sha256(project_text(case.project).encode()).hexdigest()[:16]}.toml"
    config.write_text(project_text(case.project))
    result = run_cli(["diff", before, after, "--config", config])
    assert result.code == EXIT[case.outcome], result.output
    assert case.says in result.output, result.output
    if case.outcome is Outcome.PASSES:
        assert "WARN" not in result.output and "REGRESSED" not in result.output.upper(), result.output
