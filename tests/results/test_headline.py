"""What a results document read from a file may state as its verdict (issue 41): a skipped op or case is never
part of a pass unless the run allowed skips, and then the verdict says "passed with N skipped"; a kernel row
holding an error-level violation (a rule that failed, or could not be checked) fails, whatever its status says;
a passing row at or above `warn_threshold` of its allowance is listed as close to its limit."""

from __future__ import annotations

import copy
from typing import Any

from gpuemu_ci.render.markdown import render_comment
from gpuemu_ci.render.text import headline, verdict_label
from gpuemu_ci.results.codec import from_json
from gpuemu_ci.results.model import Headline, Results
from tests.support_reports import results_document


def _passing(**overrides: Any) -> dict[str, Any]:
    """The support document with its failing op made to pass (the skipped `gemm` op stays skipped)."""
    document = results_document(verdict="passed", exit_code=0, **overrides)
    softmax = document["ops"][0]
    softmax.update(status="passed", cases_passed=12, cases_failed=0, failures=[])
    softmax["dtypes"][1].update(status="passed", cases_failed=0, worst_headroom=0.5)
    return document


def _read(document: dict[str, Any]) -> Results:
    import json

    return from_json(json.dumps(document).encode())


def test_a_skipped_op_stops_a_pass_unless_the_run_allowed_skips() -> None:
    refused = _read(_passing())
    assert refused.skipped == 1 and refused.headline is Headline.ERROR
    assert "skipped ops and cases never count as passed" in headline(refused)
    allowed = _read(_passing(skips_allowed=True))
    assert allowed.headline is Headline.PASSED and verdict_label(allowed) == "passed with 1 skipped"
    assert "passed with 1 skipped" in render_comment(allowed)


def test_cases_skipped_inside_a_passing_op_count_as_skipped() -> None:
    document = _passing()
    document["ops"] = document["ops"][:1]
    document["ops"][0].update(cases_total=14, cases_skipped=2)
    document["ops"][0]["dtypes"][0].update(
        cases_total=8, cases_skipped=2, skip_reason="too large for this machine"
    )
    assert _read(document).headline is Headline.ERROR
    document["skips_allowed"] = True
    assert verdict_label(_read(document)) == "passed with 2 skipped"


def test_an_op_in_other_shards_is_not_a_skip() -> None:
    document = _passing()
    document["ops"][1].update(skip_reason="other shards")
    assert _read(document).headline is Headline.PASSED


def test_a_kernel_row_with_an_error_level_violation_fails_whatever_its_status() -> None:
    document = _passing(skips_allowed=True)
    violation = {
        "kernel": "gelu_kernel",
        "arch": "sm_80",
        "metric": "forbidden_sass_pattern",
        "limit": "LDG",
        "value": None,
        "message": "gelu_kernel [sm_80]: forbidden sass pattern 'LDG' NOT CHECKED: no SASS tool",
        "severity": "error",
        "unchecked": True,
    }
    document["kernels"][0]["violations"] = [violation]  # a forged or hand-edited "passed" row
    assert _read(document).headline is Headline.FAILED
    allowed = copy.deepcopy(document)
    allowed["kernels"][0]["violations"][0]["severity"] = "warning"  # ci.allow_unchecked
    assert _read(allowed).headline is Headline.PASSED
    assert "not checked (allowed)" in render_comment(_read(allowed))


def test_rows_close_to_their_limit_are_listed_against_the_documents_warn_threshold() -> None:
    document = _passing(skips_allowed=True, warn_threshold=0.4)
    near = _read(document).near_limit()
    assert [(op.name, row.dtype, used) for op, row, used in near] == [("softmax", "float16", 0.5)]
    assert _read(_passing(skips_allowed=True, warn_threshold=0.8)).near_limit() == ()
    assert _read(_passing(skips_allowed=True)).near_limit() == ()  # an older document: no threshold recorded
