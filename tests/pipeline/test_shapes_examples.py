"""examples/shapes: grouped-query attention over a KV cache, group norm, max pooling and partial rotary, all
configured without hooks (derived dims, kwargs bound to dims, ranges that name dims, constraints), pass the
quick suite; the results say per op and dtype what the cases covered, and every report shows it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES

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


def test_the_examples_pass_in_every_dtype(run):
    _, document = run
    ops = {op["name"]: op for op in document["ops"]}
    assert set(ops) == {"gqa_attention", "group_norm", "max_pool1d", "partial_rotary"}
    for op in ops.values():
        assert (
            op["status"] == "passed" and op["cases_total"] == 24
        )  # 16 quick slots for float32, 8 for bfloat16
        assert {row["dtype"] for row in op["dtypes"]} == {"float32", "bfloat16"} and not op["dtypes_not_run"]


def test_coverage_says_what_ran(run):
    _, document = run
    ops = {op["name"]: op for op in document["ops"]}
    expected = {  # the first 16 slots for the first dtype, the first 8 for the other
        "float32": ({"typical": 3, "boundary": 6, "tile": 7}, 10),
        "bfloat16": ({"typical": 2, "boundary": 3, "tile": 3}, 7),
    }
    for op in ops.values():
        for row in op["dtypes"]:
            coverage = row["coverage"]
            classes, modes = expected[row["dtype"]]
            assert coverage["size_classes"] == classes and len(coverage["value_modes"]) == modes
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
    out, _ = run
    summary = cli("render", "summary", out / "results.json")
    html = cli("render", "html", out / "results.json")
    assert summary.code == 0 and html.code == 0
    assert "Coverage: what the cases exercised" in summary.stdout
    assert "| `group_norm` | float32 |" in summary.stdout and "tile±1 7" in summary.stdout
    assert "| `group_norm` | bfloat16 |" in summary.stdout and "tile±1 3" in summary.stdout
    assert "<h2>Coverage</h2>" in html.stdout and "num_groups" in html.stdout


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
