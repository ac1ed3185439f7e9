"""Issue 3's bar: four realistic bugs are found by the quick suite from power-of-two schemas, and every found
failure replays from its seed and from its snapshot (same verdict, same error) and minimizes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpuemu_ci.backends.loading import load_callable
from gpuemu_ci.config.load import load_config
from gpuemu_ci.fuzz.case import build_case
from gpuemu_ci.pipeline.gate import run_gate
from gpuemu_ci.pipeline.minimize import minimize
from gpuemu_ci.pipeline.replay import case_from_snapshot, replay
from gpuemu_ci.pipeline.session import Session
from gpuemu_ci.pipeline.settings import RunOptions
from gpuemu_ci.results.codec import read_results, to_builtins, write_results
from tests.conftest import EXAMPLES

ZOO = EXAMPLES / "bug-zoo" / "gpuemu.toml"


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    out = tmp_path_factory.mktemp("zoo")
    config = load_config(ZOO, env={"GPUEMU_USER_CONFIG": "none"})
    results = run_gate(config, RunOptions(out_dir=out, jobs=2), gpu=None)
    write_results(out, results)
    with Session(config, RunOptions(out_dir=out, jobs=1), gpu=None) as session:
        yield config, to_builtins(results), out, session


def test_typical_sizes_are_all_powers_of_two():
    config = load_config(ZOO, env={"GPUEMU_USER_CONFIG": "none"})
    for op in config.ops:
        for dim in op.shapes.dims:
            assert all(size & (size - 1) == 0 for size in dim.typical), (op.name, dim)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["softmax_tail_mask", "rmsnorm_ignores_strides", "rowmax_init_zero", "attention_no_rescale"]
)
def test_quick_suite_finds_the_bug(zoo, name):
    _, document, _, _ = zoo
    op = next(o for o in document["ops"] if o["name"] == name)
    assert op["status"] == "failed" and op["cases_failed"] > 0
    assert all(f["replay"].endswith(f"--seed {f['case_seed']}") for f in op["failures"])


@pytest.mark.slow
def test_what_triggers_each_bug(zoo):
    _, document, _, _ = zoo
    ops = {o["name"]: o for o in document["ops"]}
    assert any(f["shapes"]["x"][1] % 64 for f in ops["softmax_tail_mask"]["failures"])
    assert all(f["layouts"]["x"] != "contiguous" for f in ops["rmsnorm_ignores_strides"]["failures"])
    assert {f["distribution"] for f in ops["rowmax_init_zero"]["failures"]} <= {
        "adversarial:all_negative",
        "adversarial:offset",
        "boundary",
        "adversarial:wide_range",
        "adversarial:cancellation",
        "adversarial:ties",
        "adversarial:underflow_rows",
        "regular",
    }
    assert any(f["distribution"] == "adversarial:all_negative" for f in ops["rowmax_init_zero"]["failures"])
    assert all(f["shapes"]["k"][1] > 64 for f in ops["attention_no_rescale"]["failures"])


@pytest.mark.slow
def test_every_failure_replays_from_seed_and_snapshot(zoo):
    config, document, out, session = zoo
    for op_record in document["ops"]:
        op = config.op(op_record["name"])
        for failure in op_record["failures"][:3]:
            seed = failure["case_seed"]
            from_seed = replay(session, op, seed=seed, generator_version=document["generator_version"])
            from_snapshot = replay(session, op, snapshot=out / failure["snapshot"])
            for outcome in (from_seed, from_snapshot):
                assert outcome.failed
                if op.name == "rmsnorm_ignores_strides":
                    continue  # it reads memory outside its view: what it finds there is not reproducible
                assert outcome.report.kind == failure["kind"], op.name
                if failure["max_abs_error"] is not None:
                    assert outcome.report.max_abs_error == failure["max_abs_error"]
            # The seed regenerates exactly the bytes the snapshot saved.
            regenerated = build_case(op, seed, config.root, load=load_callable)
            saved = case_from_snapshot(op, out / failure["snapshot"])
            for name, array in saved.logical.items():
                assert array.dtype == regenerated.logical[name].dtype
                assert array.tobytes() == np.ascontiguousarray(regenerated.logical[name]).tobytes()
                assert saved.arrays[name].strides == regenerated.arrays[name].strides


@pytest.mark.slow
def test_replay_refuses_another_generator_version(zoo):
    config, document, _out, session = zoo
    failure = document["ops"][0]["failures"][0]
    from gpuemu_ci.errors import UsageError

    with pytest.raises(UsageError, match="generator version"):
        replay(session, config.ops[0], seed=failure["case_seed"], generator_version="0")


@pytest.mark.slow
def test_minimize_shrinks_to_a_smaller_failing_case(zoo):
    config, document, _out, session = zoo
    op_record = next(o for o in document["ops"] if o["name"] == "softmax_tail_mask")
    failure = max(op_record["failures"], key=lambda f: np.prod(f["shapes"]["x"]))
    op = config.op("softmax_tail_mask")
    result = minimize(session, op, failure["case_seed"])
    assert np.prod(list(result.dims.values())) < np.prod(failure["shapes"]["x"])
    assert result.dims["N"] % 64  # still a tail
    assert result.kind.value == failure["kind"]  # the same kind of failure, not another one found on the way
    assert all(choice.layout.value == "contiguous" for choice in result.case.layouts.values())
    assert "dims" in result.in_words() and "->" in result.in_words()
    again = replay(session, op, snapshot=session.out_dir / result.snapshot)
    assert again.failed and again.kind is result.kind


@pytest.mark.slow
def test_minimize_keeps_the_layout_a_stride_bug_needs(zoo):
    config, document, _out, session = zoo
    op_record = next(o for o in document["ops"] if o["name"] == "rmsnorm_ignores_strides")
    failure = op_record["failures"][0]
    result = minimize(session, config.op("rmsnorm_ignores_strides"), failure["case_seed"], max_runs=60)
    assert result.case.layouts["x"].layout.value != "contiguous"  # without it the bug is gone
    assert "x" not in result.made_contiguous


@pytest.mark.slow
def test_replay_cli_from_results_file(zoo, cli):
    _, document, out, _ = zoo
    case_id = document["ops"][1]["failures"][0]["case_id"]
    args = ["replay", str(out / "results.json"), "--config", str(ZOO), "--case", case_id, "--out", str(out)]
    replayed = cli(*args)
    assert replayed.code == 1 and "REPRODUCED" in replayed.stderr
    assert cli(*args, "--from-snapshots").code == 1
    assert (
        json.loads((out / "results.json").read_text())["ops"]
        == to_builtins(read_results(out / "results.json"))["ops"]
    )
