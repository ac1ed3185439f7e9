"""examples/shapes: grouped-query attention over a KV cache, group norm, max pooling and partial rotary, all
configured without hooks (derived dims, kwargs bound to dims, ranges that name dims, constraints), pass the
quick suite; the results say per op and dtype what the cases covered, and every report shows it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuemu_ci.plan.expand import QUICK_SLOTS, SLOT_TABLE
from gpuemu_ci.plan.model import SizeClass
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.slow

SHAPES = EXAMPLES / "shapes" / "gpuemu.toml"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    from tests.support_cli import run_cli

    out = tmp_path_factory.mktemp("shapes")
    result = run_cli(
        ["run", "--config", SHAPES, "--out", out, "--no-lint"], env={"GPUEMU_USER_CONFIG": "none"}
    )
    assert result.code == 0, result.stderr[-3000:]
    return out, json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_the_examples_pass_in_every_dtype(run):
    _, document = run
    ops = {op["name"]: op for op in document["ops"]}
    assert set(ops) == {"gqa_attention", "group_norm", "max_pool1d", "partial_rotary"}
    for op in ops.values():
        assert op["status"] == "passed"
        assert {row["dtype"] for row in op["dtypes"]} == {"float32", "bfloat16"} and not op["dtypes_not_run"]
        rows = {row["dtype"]: row for row in op["dtypes"]}
        # 16 quick slots for float32; 8 for bfloat16, plus a tile case for each varying dim the first 8 leave
        # below its declared max
        assert rows["float32"]["cases_total"] == 16 and rows["bfloat16"]["cases_total"] >= 8
        for row in rows.values():  # every declared size reached, in every dtype
            coverage = row["coverage"]
            assert coverage["declared_max"], op["name"]
            for dim, declared in coverage["declared_max"].items():
                assert coverage["dims"][dim]["max"] == declared, (op["name"], row["dtype"], dim)


@pytest.mark.slow
def test_coverage_says_what_ran(run):
    _, document = run
    ops = {op["name"]: op for op in document["ops"]}
    expected = {  # the first 16 slots for the first dtype, the first 8 for the other (and its extra tile cases)
        "float32": ({"typical": 3, "boundary": 6, "tile": 7}, 10),
        "bfloat16": ({"typical": 2, "boundary": 3, "tile": 3}, 7),
    }
    for op in ops.values():
        for row in op["dtypes"]:
            coverage = row["coverage"]
            classes, modes = expected[row["dtype"]]
            extra_tiles = row["cases_total"] - sum(classes.values())
            assert coverage["size_classes"] == {**classes, "tile": classes["tile"] + extra_tiles}
            assert modes <= len(coverage["value_modes"]) <= modes + extra_tiles
            assert {"contiguous", "transposed"} <= set(coverage["layouts"]) or op["name"] == "max_pool1d"
            assert all(r["min"] <= r["max"] for r in coverage["dims"].values())
    norm = ops["group_norm"]["dtypes"][0]["coverage"]
    groups = norm["dims"]["G"]
    assert set(norm["kwargs"]) == {"eps", "num_groups"} and sorted(norm["kwargs"]["eps"]) == [1e-06, 1e-05]
    assert all(groups["min"] <= g <= groups["max"] for g in norm["kwargs"]["num_groups"])
    pool = ops["max_pool1d"]["dtypes"][0]["coverage"]
    assert set(pool["kwargs"]) == {"kernel_size", "stride", "padding", "dilation"}
    assert pool["dims"]["L"]["max"] >= 4097  # the tile ladder reached past block 4096
    attention = ops["gqa_attention"]["dtypes"][0]["coverage"]
    assert attention["dims"]["LQ"]["min"] == 1 and attention["dims"]["LQ"]["max"] >= 64  # decode and prefill
    assert (
        attention["dims"]["P"]["max"] >= 256
        and attention["dims"]["LK"]["max"] > attention["dims"]["LQ"]["max"]
    )


def test_the_summary_and_the_html_report_show_coverage(run, cli):
    out, document = run
    summary = cli("render", "summary", out / "results.json")
    html = cli("render", "html", out / "results.json")
    assert summary.code == 0 and html.code == 0
    assert "Coverage: what the cases exercised" in summary.stdout
    (norm,) = [op for op in document["ops"] if op["name"] == "group_norm"]
    lines = summary.stdout.splitlines()
    for row in norm["dtypes"]:
        coverage_line = [
            ln for ln in lines if ln.startswith(f"| `group_norm` | {row['dtype']} |") and "tile±1" in ln
        ]
        assert (
            len(coverage_line) == 1
            and f"tile±1 {row['coverage']['size_classes']['tile']}" in coverage_line[0]
        )
    assert "<h2>Coverage</h2>" in html.stdout and "num_groups" in html.stdout


@pytest.mark.slow
def test_a_narrowed_quick_suite_says_which_dtypes_it_left_out(tmp_path, cli):
    config = tmp_path / "gpuemu.toml"
    text = SHAPES.read_text().replace("[ci]\n", '[ci]\nquick_dtypes = ["float32"]\n')
    config.write_text(text)
    (tmp_path / "kernels").symlink_to(SHAPES.parent / "kernels")
    result = cli("run", "--config", config, "--out", tmp_path / "out", "--op", "max_pool1d", "--no-lint")
    assert result.code == 0, result.stderr[-2000:]
    document = json.loads((tmp_path / "out" / "results.json").read_text())
    assert document["ops"][0]["dtypes_not_run"] == ["bfloat16"]
    comment = cli("render", "comment", tmp_path / "out" / "results.json").stdout
    assert "bfloat16 not run in the quick suite (max\\_pool1d)" in comment


@pytest.mark.slow
def test_typical_sizes_this_machine_cannot_hold_are_skipped_and_said_never_passed(tmp_path: Path) -> None:
    """The user's typical sizes run as declared (never capped); a typical case larger than this machine's memory
    is not run, and the results say so per dtype instead of counting it as a pass: the run exits 3."""
    from tests.support_cli import run_cli

    (tmp_path / "ops.py").write_text("def double(x):\n    return x * 2\n\ndef ref(x):\n    return x * 2\n")
    (tmp_path / "gpuemu.toml").write_text(
        '[project]\nname = "huge"\n[validation]\ndtypes = ["float32"]\n'
        '[[ops]]\nname = "double"\nop = "ops:double"\nreference = "ops:ref"\nfamily = "elementwise"\n'
        "[ops.dims]\nM = { min = 1, max = 4194304, typical = [4194304] }\n"
        "N = { min = 1, max = 4194304, typical = [4194304] }\n"
        '[ops.inputs]\nx = ["M", "N"]\n'
    )
    out = tmp_path / "out"
    result = run_cli(
        ["run", "--config", tmp_path / "gpuemu.toml", "--out", out, "--no-lint"],
        env={"GPUEMU_USER_CONFIG": "none"},
    )
    document = json.loads((out / "results.json").read_text())
    (op,) = document["ops"]
    (row,) = op["dtypes"]
    skipped = row["coverage"]["skipped"]
    assert result.code == 3, result.stderr[-2000:]  # never passed: the skipped cases stop a pass (issue 41)
    assert "skipped ops and cases never count as passed" in result.stderr
    assert skipped and all("typical sizes" in reason and "usable here" in reason for reason in skipped)
    assert "typical" not in row["coverage"]["size_classes"]  # none of the 64 TiB cases counted as run
    typical_slots = sum(1 for _, size, _ in SLOT_TABLE[:QUICK_SLOTS] if size is SizeClass.TYPICAL)
    assert op["cases_total"] == QUICK_SLOTS and op["cases_skipped"] == row["cases_skipped"] == typical_slots
    assert op["cases_passed"] == QUICK_SLOTS - typical_slots and op["status"] == "passed"
    assert row["skip_reason"] == "too large for this machine's memory"
