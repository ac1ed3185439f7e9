"""SARIF, JUnit and workflow-command annotations, rendered from real `gpuemu-ci run` output.

SARIF is validated against the SARIF 2.1.0 JSON schema (tests/fixtures/sarif/, see its README);
JUnit is parsed back with ElementTree. The kernel run needs nvcc (skipped without it).
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gpuemu_ci.render.annotations import render_annotations
from gpuemu_ci.render.junit import render_junit
from gpuemu_ci.render.sarif import FINGERPRINT_KEY, render_sarif, sarif_log
from gpuemu_ci.results.model import Results
from tests.support_real_runs import real_run_with_project as real_run
from tests.support_tiers import runs_a_gate

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = "<img src=x onerror=alert(1)>|**bold**"


def report_of(document: dict[str, Any]) -> Results:
    """A results document as the renderers take it: validated by the one results model. Built from the dict
    (not JSON text), so strings JSON cannot carry (a lone surrogate from an op's message) reach the renderer."""
    return msgspec.convert(document, type=Results, strict=False)  # strict=False: JSON object keys are text


@pytest.fixture(scope="module")
@runs_a_gate
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict[str, Any], Path]]:
    base = tmp_path_factory.getbasetemp()
    return {name: real_run(base, name) for name in ("passing", "failing", "mixed")}


@pytest.fixture(scope="module")
@runs_a_gate
def kernel_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    return real_run(tmp_path_factory.getbasetemp(), "kernels")


def failing_pairs(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (op["name"], row["dtype"])
        for op in document["ops"]
        for row in op["dtypes"]
        if row["status"] == "failed"
    }


def check_sarif(validator: Any, text: str) -> dict[str, Any]:
    log = json.loads(text)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(log)]
    assert not errors, errors[:5]
    result: dict[str, Any] = log
    return result


@pytest.mark.slow
@pytest.mark.parametrize("name", ["passing", "failing", "mixed"])
def test_sarif_of_real_runs_is_valid_with_one_result_per_failing_op_dtype(
    runs: dict[str, tuple[dict[str, Any], Path]], sarif_validator: Any, name: str
) -> None:
    document, _ = runs[name]
    log = check_sarif(sarif_validator, render_sarif(report_of(document), job="gate"))
    run = log["runs"][0]
    errors = [r for r in run["results"] if r["ruleId"].startswith("op/") and r["level"] == "error"]
    got = {(r["properties"]["op"], r["properties"]["dtype"]) for r in errors}
    assert got == failing_pairs(document) and len(errors) == len(got)
    lines = {op["name"]: op["line"] for op in document["ops"]}
    for result in errors:
        location = result["locations"][0]["physicalLocation"]
        assert location["artifactLocation"]["uri"] == document["config"]["path"]
        assert location["region"]["startLine"] == lines[result["properties"]["op"]]
        assert run["tool"]["driver"]["rules"][result["ruleIndex"]]["id"] == result["ruleId"]
    fingerprints = [r["partialFingerprints"][FINGERPRINT_KEY] for r in run["results"]]
    assert len(set(fingerprints)) == len(fingerprints)
    assert run["automationDetails"]["id"] == "gpuemu-ci/gate/"


@pytest.mark.slow
def test_sarif_skips_and_errors_are_stated(runs: dict[str, tuple[dict[str, Any], Path]]) -> None:
    run = sarif_log(report_of(runs["mixed"][0]))["runs"][0]
    notes = [n["message"]["text"] for n in run["invocations"][0]["toolExecutionNotifications"]]
    assert any(n.startswith("op gpu_only was skipped (no GPU) and not tested") for n in notes)
    assert not any(r["properties"].get("op") == "gpu_only" for r in run["results"])
    refbad = [r for r in run["results"] if r["properties"].get("op") == "refbad"]
    assert [r["ruleId"] for r in refbad] == ["op/not-judged"] and refbad[0]["level"] == "warning"


@pytest.mark.slow
def test_sarif_fingerprints_follow_the_finding_not_the_seed(
    runs: dict[str, tuple[dict[str, Any], Path]],
) -> None:
    document = runs["failing"][0]
    other = copy.deepcopy(document)
    other["seed"] += 1
    for op in other["ops"]:
        op["line"] = (op["line"] or 0) + 7  # the op moved in gpuemu.toml
        for failure in op["failures"]:
            failure["case_seed"] ^= 0x5A5A
            failure["replay"] += " --seed-changed"

    def prints(doc: dict[str, Any]) -> dict[tuple[str, str], str]:
        results = sarif_log(report_of(doc))["runs"][0]["results"]
        return {
            (r["properties"]["op"], r["properties"]["dtype"]): r["partialFingerprints"][FINGERPRINT_KEY]
            for r in results
        }

    before = prints(document)
    assert before and prints(other) == before
    renamed = copy.deepcopy(document)
    for op in renamed["ops"]:
        op["name"] += "_v2"
    assert set(prints(renamed).values()).isdisjoint(before.values())


@pytest.mark.slow
def test_sarif_of_kernel_lint(kernel_run: tuple[dict[str, Any], Path], sarif_validator: Any) -> None:
    document, project = kernel_run
    log = check_sarif(sarif_validator, render_sarif(report_of(document), source_root=project))
    results = log["runs"][0]["results"]
    spill_source = (project / "kernels" / "spill.cu").read_text().splitlines()
    by_entry = {}
    for result in (r for r in results if r["ruleId"] in ("kernel/registers", "kernel/spills")):
        location = result["locations"][0]["physicalLocation"]
        assert location["artifactLocation"]["uri"] == "kernels/spill.cu"
        line = location["region"]["startLine"]
        by_entry[result["properties"]["entry"]] = line
        assert re.search(rf"__global__ void {result['properties']['entry']}\(", spill_source[line - 1])
        related = result["relatedLocations"][0]["physicalLocation"]
        assert related["artifactLocation"]["uri"] == "gpuemu-kernels.toml"
    assert set(by_entry) == {"spill_regs", "local_array"}
    compile_errors = [r for r in results if r["ruleId"] == "kernel/compile-error"]
    assert len(compile_errors) == 1
    location = compile_errors[0]["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "kernels/bad.cu" and location["region"]["startLine"] == 2


def parse_junit(text: str) -> ET.Element:
    root = ET.fromstring(text.encode("utf-8"))
    names = [case.get("name") for case in root.iter("testcase")]
    assert len(names) == len(set(names)), names
    for suite in [root, *root.iter("testsuite")]:
        cases = list(suite.iter("testcase"))
        assert int(suite.get("tests", "-1")) == len(cases)
        for outcome, key in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
            assert int(suite.get(key, "-1")) == sum(1 for c in cases if c.find(outcome) is not None)
    return root


def outcomes(root: ET.Element) -> dict[str, str]:
    found = {}
    for case in root.iter("testcase"):
        child = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        found[case.get("name", "")] = "passed" if child is None else child.tag
    return found


@pytest.mark.parametrize("name", ["passing", "failing", "mixed"])
def test_junit_has_one_testcase_per_op_dtype(runs: dict[str, tuple[dict[str, Any], Path]], name: str) -> None:
    document, _ = runs[name]
    root = parse_junit(render_junit(report_of(document)))
    expected = {
        f"{op['name']}[{row['dtype']}]" if op["dtypes"] else op["name"]
        for op in document["ops"]
        for row in (op["dtypes"] or [None])
    }
    assert set(outcomes(root)) == expected


def test_junit_maps_outcomes_honestly(runs: dict[str, tuple[dict[str, Any], Path]]) -> None:
    root = parse_junit(render_junit(report_of(runs["mixed"][0])))
    assert outcomes(root) == {
        "good[float32]": "passed",
        "gpu_only": "skipped",
        "refbad[float32]": "error",
        "raises[float32]": "failure",
        f"{HOSTILE}[float32]": "failure",
    }
    failure = next(c for c in root.iter("testcase") if c.get("name") == "raises[float32]").find("failure")
    assert failure is not None and failure.get("type") == "raised"
    assert "replay: gpuemu-ci replay --config gpuemu.toml --op raises --seed" in (failure.text or "")


def test_junit_names_stay_unique_and_the_xml_stays_valid(
    runs: dict[str, tuple[dict[str, Any], Path]],
) -> None:
    document = copy.deepcopy(runs["mixed"][0])
    twin = copy.deepcopy(next(op for op in document["ops"] if op["name"] == "raises"))
    twin["failures"][0]["message"] = "control \x00\x1b chars and ]]> and \ud800"
    document["ops"].append(twin)
    root = parse_junit(render_junit(report_of(document)))
    assert {"raises[float32]", "raises[float32]#2"} <= set(outcomes(root))


@pytest.mark.slow
def test_junit_of_kernel_lint(kernel_run: tuple[dict[str, Any], Path]) -> None:
    root = parse_junit(render_junit(report_of(kernel_run[0])))
    kernels = {k: v for k, v in outcomes(root).items() if k.endswith("[sm_80]")}
    assert kernels == {"gelu[sm_80]": "passed", "spill[sm_80]": "failure", "bad[sm_80]": "failure"}
    bad = next(c for c in root.iter("testcase") if c.get("name") == "bad[sm_80]").find("failure")
    assert bad is not None and bad.get("type") == "compile-error"


def test_annotations_point_at_the_op_line_and_escape_everything(
    runs: dict[str, tuple[dict[str, Any], Path]],
) -> None:
    document, _ = runs["mixed"]
    text = render_annotations(report_of(document))
    lines = text.splitlines()
    assert all(re.match(r"^::(error|warning|notice) ", line) for line in lines)
    line_of = {op["name"]: op["line"] for op in document["ops"]}
    hostile = next(line for line in lines if "onerror" in line)
    assert hostile.startswith(f"::error file=gpuemu.toml,line={line_of[HOSTILE]},title=gpuemu-ci%3A op ")
    assert "%0AReplay: gpuemu-ci replay" in hostile  # the newline is data, not a new command
    raises = next(line for line in lines if "op raises failed" in line)
    assert "boom <b>not bold</b> @octocat ```" in raises
    skipped = next(line for line in lines if "gpu_only" in line)
    assert skipped.startswith(f"::warning file=gpuemu.toml,line={line_of['gpu_only']},")
    assert "skipped (no GPU)" in skipped


def test_annotations_are_capped_with_a_notice(runs: dict[str, tuple[dict[str, Any], Path]]) -> None:
    document = copy.deepcopy(runs["failing"][0])
    softmax = next(op for op in document["ops"] if op["name"] == "softmax")
    document["ops"] = [{**copy.deepcopy(softmax), "name": f"op,{i}:x"} for i in range(25)]
    lines = render_annotations(report_of(document)).splitlines()
    errors = [line for line in lines if line.startswith("::error ")]
    assert len(errors) == 10
    assert "title=gpuemu-ci%3A op op%2C0%3Ax failed" in errors[0]
    assert lines[-1].startswith("::notice title=gpuemu-ci::15 more annotation(s) not shown")


@pytest.mark.slow
def test_annotations_of_kernel_lint(kernel_run: tuple[dict[str, Any], Path]) -> None:
    document, project = kernel_run
    lines = render_annotations(report_of(document), source_root=project).splitlines()
    spill = next(line for line in lines if "kernel spill failed lint" in line)
    found = re.search(r"line=(\d+)", spill)
    assert found is not None
    line = int(found.group(1))
    assert spill.startswith("::error file=kernels/spill.cu,")
    assert "__global__" in (project / "kernels" / "spill.cu").read_text().splitlines()[line - 1]
    assert any(line.startswith("::error file=kernels/bad.cu,line=2,") for line in lines)


def test_junit_times_are_the_time_spent_in_each_op_and_dtype(
    runs: dict[str, tuple[dict[str, Any], Path]],
) -> None:
    """A CI system's slowest-tests view points at the op and dtype that took the time (issue #22, item 7)."""
    document, _ = runs["mixed"]
    root = parse_junit(render_junit(report_of(document)))
    (suite,) = [s for s in root.iter("testsuite") if s.get("name") == "gpuemu-ci.ops"]
    spent = {
        f"{op['name']}[{row['dtype']}]": row["duration_s"] for op in document["ops"] for row in op["dtypes"]
    }
    times = {case.get("name"): float(case.get("time", "nan")) for case in suite.iter("testcase")}
    ran = [name for name in spent if spent[name]]
    assert ran and all(times[name] == pytest.approx(spent[name], abs=1e-6) for name in ran), (times, spent)
    assert all(times[name] > 0 for name in ran)  # real cases take real time: none is written as 0
    assert float(suite.get("time", "nan")) == pytest.approx(sum(times.values()), abs=5e-3)
