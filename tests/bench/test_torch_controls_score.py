"""bench/torch_controls_score.py: a flag on PyTorch's kernel counts as a defect of the kernel only when it matches
an entry of known_defects.toml exactly (op, dtype, kind, kwargs, layout, message); everything else stays a false
alarm, and the score exits 1 on any."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.bench.support import load_script

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "torch_controls_score.py"
CONTROLS = REPO / "bench" / "torch_controls" / "gpuemu.toml"


@pytest.fixture(scope="module")
def score() -> ModuleType:
    return load_script(SCRIPT, "torch_controls_score_under_test")


def _failure(**changes: Any) -> dict[str, Any]:
    failure = {
        "dtype": "bfloat16",
        "kind": "nonfinite",
        "kwargs": {},
        "layouts": {"x": "row_padded", "w": "broadcast", "b": "broadcast"},
        "message": "2080 of 4160 elements have the wrong non-finite class; first at (0, 0): got nan",
        "distribution": "adversarial:ascending",
        "shapes": {"x": [64, 1025]},
        "case_seed": 1,
    }
    failure.update(changes)
    return failure


def _document(op: str, failures: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "ops": [
            {
                "name": op,
                "status": "failed",
                "family": "matmul",
                "dtypes": [{"dtype": "bfloat16", "cases_total": 40, "cases_failed": len(failures)}],
                "failures": failures,
            }
        ]
    }


def test_every_listed_defect_names_a_control_and_says_what_shows_it(score):
    defects = score.load_defects(score.KNOWN_DEFECTS)
    assert defects
    controls = CONTROLS.read_text()
    for defect in defects:
        assert f'name = "{defect.op}"' in controls
        assert len(defect.what.split()) >= 20  # evidence, not a label


def test_only_an_exact_match_is_counted_as_a_defect_of_torch(score):
    defects = score.load_defects(score.KNOWN_DEFECTS)
    cells: dict[Any, Any] = {}
    seen: dict[Any, int] = {}
    document = _document(
        "linear",
        [
            _failure(),  # the listed defect: NaN from a row-padded bfloat16 input
            _failure(layouts={"x": "contiguous", "w": "broadcast", "b": "broadcast"}),  # no padding to read
            _failure(kind="mismatch"),  # a wrong value is no NaN from the padding
            _failure(dtype="float16"),
        ],
    )
    score.collect(document, cells, {}, defects, seen)
    assert cells[("linear", "bfloat16")].defects == 1
    assert sum(seen.values()) == 1
    assert cells[("linear", "bfloat16")].first_failure  # the first false alarm is kept for the report
    assert cells[("linear", "float16")].defects == 0


def test_the_score_fails_on_a_false_alarm_and_passes_on_a_listed_defect(tmp_path):
    def run(failures: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
        saved = tmp_path / str(len(failures)) / "seed-1"
        saved.mkdir(parents=True)
        (saved / "results.json").write_text(json.dumps(_document("linear", failures)))
        return subprocess.run(
            [sys.executable, str(SCRIPT), "--results", str(saved.parent), "--seeds", "1", "--no-baseline"],
            capture_output=True,
            text=True,
            check=False,
        )

    listed = run([_failure()])
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "false alarms" in listed.stdout and "0/40" in listed.stdout
    alarm = run([_failure(), _failure(layouts={"x": "contiguous"})])
    assert alarm.returncode == 1
    assert "NOT MET" in alarm.stdout
