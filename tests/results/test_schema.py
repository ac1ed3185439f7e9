"""results.json has a JSON Schema (gpuemu_ci/schemas/results.schema.json) that real runs satisfy and
that catches the mistakes a producer or a hand-edited file can make."""

from __future__ import annotations

import copy
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuemu_ci.errors import ExitCode, InfraError, UsageError
from gpuemu_ci.results.schema import load_schema, validate_results
from tests.real_runs import real_run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def failing(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return real_run(tmp_path_factory.getbasetemp(), "failing")


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = load_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema_version"] == {"const": "1"}


@pytest.mark.parametrize("name", ["passing", "failing", "cut_short", "mixed"])
def test_real_runs_validate(tmp_path_factory: pytest.TempPathFactory, name: str) -> None:
    pytest.importorskip("jsonschema")
    document = real_run(tmp_path_factory.getbasetemp(), name)
    validate_results(document)
    expected = {"passing": "passed", "failing": "failed", "mixed": "failed"}.get(name)
    assert expected is None or document["verdict"] == expected
    if name == "cut_short":
        assert document["cut_short"] is True and document["verdict"] in ("failed", "incomplete")


def test_a_real_run_with_kernels_validates(tmp_path_factory: pytest.TempPathFactory) -> None:
    pytest.importorskip("jsonschema")
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    document = real_run(tmp_path_factory.getbasetemp(), "kernels")
    validate_results(document)
    statuses = {k["name"]: k["status"] for k in document["kernels"]}
    assert statuses == {"gelu": "passed", "spill": "failed", "bad": "failed"}
    assert document["lint"]["status"] == "ran"
    assert any(k["violations"] for k in document["kernels"]) and any(k["error"] for k in document["kernels"])


def test_a_run_with_a_baseline_diff_validates(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    pytest.importorskip("jsonschema")
    from gpuemu_ci.config.model import Policies
    from gpuemu_ci.diff.apply import apply_baseline

    base = tmp_path_factory.getbasetemp()
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(real_run(base, "passing")))
    document = apply_baseline(real_run(base, "failing"), baseline, Policies())
    assert document["diff"]["status"] == "compared" and document["diff"]["entries"]
    validate_results(document)
    missing = apply_baseline(real_run(base, "failing"), tmp_path / "absent.json", Policies())
    assert missing["diff"]["status"] == "no_baseline"
    validate_results(missing)


def test_the_diff_section_is_the_diff_stage_schema() -> None:
    from gpuemu_ci.diff.schema import DIFF_SCHEMA

    embedded = dict(load_schema()["$defs"]["diff"])
    embedded.pop("description")
    assert embedded == {k: v for k, v in DIFF_SCHEMA.items() if k != "$schema"}


def first_failure(document: dict[str, Any]) -> dict[str, Any]:
    return next(f for op in document["ops"] for f in op["failures"])


MISTAKES = [
    (
        "a required field is missing",
        lambda d: d.pop("verdict"),
        "(the document): 'verdict' is a required property",
    ),
    ("an unknown verdict", lambda d: d.update(verdict="ok"), "verdict: 'ok' is not one of"),
    (
        "a seed as a string",
        lambda d: first_failure(d).update(case_seed="123"),
        ".case_seed: '123' is not of type",
    ),
    ("a negative seed", lambda d: d.update(seed=-1), "seed: -1 is less than the minimum of 0"),
    ("a seed over 64 bits", lambda d: d.update(seed=2**64), "seed: 18446744073709551616 is greater than"),
    (
        "a misspelt key",
        lambda d: first_failure(d).update(seeed=1),
        "Additional properties are not allowed ('seeed'",
    ),
    ("an unknown op status", lambda d: d["ops"][0].update(status="ok"), "ops[0].status: 'ok' is not one of"),
    (
        "an unknown failure kind",
        lambda d: first_failure(d).update(kind="wrong"),
        ".kind: 'wrong' is not one of",
    ),
    (
        "a snapshot outside snapshots/",
        lambda d: first_failure(d).update(snapshot="../../etc/x.npz"),
        ".snapshot: '../../etc/x.npz' is not valid",
    ),
    (
        "a pass with a failing exit code",
        lambda d: d.update(verdict="passed", exit_code=1),
        "exit_code: 0 was expected",
    ),
    (
        "a pass that was cut short",
        lambda d: d.update(verdict="passed", exit_code=0, cut_short=True),
        "cut_short: False was expected",
    ),
    ("a bad config hash", lambda d: d["config"].update(sha256="xyz"), "config.sha256: 'xyz' does not match"),
    (
        "a negative count",
        lambda d: d["summary"].update(cases_total=-3),
        "summary.cases_total: -3 is less than",
    ),
    (
        "a diff with an unknown status",
        lambda d: d.update(diff={"status": "maybe", "message": ""}),
        "diff: {'status': 'maybe', 'message': ''} is not valid",
    ),
]


@pytest.mark.parametrize(("what", "edit", "message"), MISTAKES, ids=[m[0] for m in MISTAKES])
def test_mistakes_are_caught_and_named(failing: dict[str, Any], what: str, edit: Any, message: str) -> None:
    pytest.importorskip("jsonschema")
    document = copy.deepcopy(failing)
    edit(document)
    with pytest.raises(UsageError) as caught:
        validate_results(document, source="results.json")
    assert caught.value.exit_code is ExitCode.USAGE
    assert caught.value.message.startswith("results.json does not match the results schema (version 1):\n")
    assert message in caught.value.message, caught.value.message


def test_many_errors_are_summarised(failing: dict[str, Any]) -> None:
    pytest.importorskip("jsonschema")
    document = copy.deepcopy(failing)
    for op in document["ops"]:  # 5 wrong fields per op
        op.update(status="bogus", cases_total="x", cases_passed="x", cases_failed="x", cases_errored="x")
    with pytest.raises(UsageError) as caught:
        validate_results(document)
    lines = caught.value.message.splitlines()
    assert len(lines) == 7 and lines[-1] == f"  - ... and {5 * len(document['ops']) - 5} more"


def test_without_jsonschema_the_message_says_what_to_install(
    failing: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "jsonschema", None)  # as if it were not installed
    with pytest.raises(InfraError, match=r"needs the jsonschema package.*pip install jsonschema"):
        validate_results(failing)
