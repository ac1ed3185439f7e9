"""results.json: one model (gpuemu_ci/results/model.py) that reads and validates every document, and a JSON Schema
generated from it (gpuemu_ci/schemas/results.schema.json) that real runs satisfy and that stays in step with
the model."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from gpuemu_ci.errors import ExitCode, UsageError
from gpuemu_ci.results.codec import from_json, read_results, to_builtins, to_json
from gpuemu_ci.results.schema import generate_schema, published_schema_text, schema_text
from tests.support_real_runs import real_run
from tests.support_tiers import runs_a_gate


def schema_errors(document: dict[str, Any]) -> list[str]:
    """What the published schema says about a document (every error, with its path)."""
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(json.loads(published_schema_text()))
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(document)]


@pytest.fixture(scope="module")
@runs_a_gate
def failing(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return real_run(tmp_path_factory.getbasetemp(), "failing")


def test_the_published_schema_is_generated_from_the_model() -> None:
    assert published_schema_text() == schema_text(), (
        "gpuemu_ci/schemas/results.schema.json is stale: python -m gpuemu_ci.results.schema --write"
    )


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = generate_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$defs"]["Results"]["properties"]["schema_version"]["enum"] == ["2"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["passing", "failing", "cut_short", "mixed"])
def test_real_runs_validate(tmp_path_factory: pytest.TempPathFactory, name: str) -> None:
    document = real_run(tmp_path_factory.getbasetemp(), name)
    assert schema_errors(document) == []
    results = from_json(json.dumps(document))
    assert to_builtins(results) == document  # what was written is what the model reads back
    expected = {"passing": "passed", "failing": "failed", "mixed": "failed"}.get(name)
    assert expected is None or document["verdict"] == expected
    if name == "cut_short":
        assert document["cut_short"] is True and document["verdict"] in ("failed", "incomplete")


@pytest.mark.slow
def test_a_real_run_with_kernels_validates(tmp_path_factory: pytest.TempPathFactory) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    document = real_run(tmp_path_factory.getbasetemp(), "kernels")
    assert schema_errors(document) == []
    from_json(json.dumps(document))
    statuses = {k["name"]: k["status"] for k in document["kernels"]}
    assert statuses == {"gelu": "passed", "spill": "failed", "bad": "failed"}
    assert document["lint"]["status"] == "ran"
    assert any(k["violations"] for k in document["kernels"]) and any(k["error"] for k in document["kernels"])


@pytest.mark.slow
def test_a_run_with_a_baseline_diff_validates(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    from gpuemu_ci.config.model import Policies
    from gpuemu_ci.diff.baseline import BaselineSource, diff_against
    from gpuemu_ci.pipeline.gate import with_diff

    base = tmp_path_factory.getbasetemp()
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(real_run(base, "passing")))
    current = from_json(json.dumps(real_run(base, "failing")))
    compared = with_diff(current, diff_against(BaselineSource(baseline), current, Policies(), True))
    document = json.loads(to_json(compared))
    assert document["diff"]["status"] == "compared" and document["diff"]["entries"]
    assert schema_errors(document) == []
    missing = diff_against(BaselineSource(tmp_path / "absent.json"), current, Policies(), True)
    document = json.loads(to_json(with_diff(current, missing)))
    assert document["diff"]["status"] == "no_baseline"
    assert schema_errors(document) == []


def first_failure(document: dict[str, Any]) -> dict[str, Any]:
    return next(f for op in document["ops"] for f in op["failures"])


# (what, the edit, where the model says the problem is, what the schema says)
MISTAKES = [
    ("a required field is missing", lambda d: d.pop("verdict"), "missing required field `verdict` - at `$`"),
    ("an unknown verdict", lambda d: d.update(verdict="ok"), "- at `$.verdict`"),
    ("a seed as a string", lambda d: first_failure(d).update(case_seed="123"), "case_seed`"),
    ("a negative seed", lambda d: d.update(seed=-1), "Expected `int` >= 0 - at `$.seed`"),
    (
        "a seed over 64 bits",
        lambda d: d.update(seed=2**64),
        "seed 18446744073709551616 does not fit in 64 bits",
    ),
    ("a misspelt key", lambda d: first_failure(d).update(seeed=1), "unknown field `seeed` - at `$.ops["),
    ("an unknown op status", lambda d: d["ops"][0].update(status="ok"), "- at `$.ops[0].status`"),
    ("an unknown failure kind", lambda d: first_failure(d).update(kind="wrong"), ".failures[0].kind`"),
    (
        "a snapshot outside snapshots/",
        lambda d: first_failure(d).update(snapshot="../../etc/x.npz"),
        ".failures[0].snapshot`",
    ),
    (
        "a pass with a failing exit code",
        lambda d: d.update(verdict="passed", exit_code=1),
        "a passed verdict needs exit_code 0",
    ),
    (
        "a pass that was cut short",
        lambda d: d.update(verdict="passed", exit_code=0, cut_short=True),
        "a passed verdict needs exit_code 0 and a run that was not cut short",
    ),
    ("a bad config hash", lambda d: d["config"].update(sha256="xyz"), "- at `$.config.sha256`"),
    ("a negative count", lambda d: d["ops"][0].update(cases_total=-3), "- at `$.ops[0].cases_total`"),
    (
        "a diff with an unknown status",
        lambda d: d.update(diff={"status": "maybe", "message": ""}),
        "- at `$.diff.status`",
    ),
    ("a document nested too deeply", lambda d: d.update(notes=[_nested(100_000)]), "nested too deeply"),
]


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.slow
@pytest.mark.parametrize(("what", "edit", "message"), MISTAKES, ids=[m[0] for m in MISTAKES])
def test_mistakes_are_caught_and_named(failing: dict[str, Any], what: str, edit: Any, message: str) -> None:
    document = copy.deepcopy(failing)
    edit(document)
    data = json.dumps(document) if what != "a document nested too deeply" else _deep_json(document)
    with pytest.raises(UsageError) as caught:
        from_json(data, source="results.json")
    assert caught.value.exit_code is ExitCode.USAGE
    assert caught.value.message.startswith("results.json is not a"), caught.value.message
    assert message in caught.value.message, caught.value.message


def _deep_json(document: dict[str, Any]) -> str:
    document = dict(document, notes=["PLACEHOLDER"])
    return json.dumps(document).replace('"PLACEHOLDER"', "[" * 100_000 + "]" * 100_000)


def test_a_summary_that_disagrees_with_the_rows_is_recomputed(failing: dict[str, Any]) -> None:
    document = copy.deepcopy(failing)
    document["summary"].update(ops_failed=0, cases_failed=0)
    results = from_json(json.dumps(document))
    assert results.summary.ops_failed == failing["summary"]["ops_failed"] > 0
    assert results.summary.cases_failed == failing["summary"]["cases_failed"] > 0


def test_reading_refuses_what_is_not_a_regular_file_of_bounded_size(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="not a regular file"):
        read_results(fifo)
    with pytest.raises(UsageError, match="not a regular file"):
        read_results(Path("/dev/zero"))
    with pytest.raises(UsageError, match="not found"):
        read_results(tmp_path / "absent.json")
