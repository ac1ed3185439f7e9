"""`gpuemu-ci mutate` as a user runs it: the same seed gives the same mutants and verdicts under any
PYTHONHASHSEED, the cache gives them back without running, shards split the mutants, and bad input is a usage
error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support_cli import run_cli

pytest.importorskip("triton")
pytest.importorskip("torch")

PROJECT = Path(__file__).parent / "project"
ROOT = Path(__file__).resolve().parents[2]


def _mutate(out: Path, *extra: str, hash_seed: str = "0") -> dict[str, Any]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "gpuemu_ci", "mutate", "--config", str(PROJECT / "gpuemu.toml")]
    command += ["--out", str(out), "--op", "scale", "--max-mutants", "5", "--jobs", "2", *extra]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False, timeout=600)
    assert done.returncode == 0, done.stderr
    mutation: dict[str, Any] = json.loads((out / "results.json").read_text())["mutation"]
    return mutation


def _verdicts(mutation: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (m["number"], m["id"], m["operator"], m["line"], m["after"], m["status"], m["killed_by"], m["case"])
        for op in mutation["ops"]
        for m in op["mutants"]
    ]


@pytest.mark.slow
def test_same_seed_same_mutants_and_verdicts_under_another_hash_seed(tmp_path: Path) -> None:
    first = _mutate(tmp_path / "a", "--no-cache", hash_seed="1")
    second = _mutate(tmp_path / "b", "--no-cache", hash_seed="977")
    assert _verdicts(first) == _verdicts(second)
    assert len(_verdicts(first)) == 5
    other_seed = _mutate(tmp_path / "c", "--no-cache", "--seed", "12345")
    assert [v[1] for v in _verdicts(other_seed)] != [v[1] for v in _verdicts(first)]  # another selection


@pytest.mark.slow
def test_cached_verdicts_come_back_without_running_and_shards_split_the_mutants(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    fresh = _mutate(tmp_path / "a", "--cache", str(cache))
    again = _mutate(tmp_path / "b", "--cache", str(cache))
    assert _verdicts(fresh) == _verdicts(again)
    assert not any(m["cached"] for m in fresh["ops"][0]["mutants"])
    assert all(m["cached"] for m in again["ops"][0]["mutants"])
    shard = _mutate(tmp_path / "c", "--no-cache", "--shard", "2/2")
    statuses = [m["status"] for m in shard["ops"][0]["mutants"]]
    assert statuses[0] == "not run" and statuses[2] == "not run" and statuses[1] != "not run"
    assert shard["ops"][0]["mutants"][0]["message"] == "in another shard"


@pytest.mark.slow
def test_the_shards_of_a_mutate_run_merge_into_the_unsharded_runs_document(tmp_path: Path) -> None:
    whole = _mutate(tmp_path / "whole", "--no-cache")
    shards = [tmp_path / f"shard{k}" for k in (1, 2)]
    for k, out in enumerate(shards, start=1):
        _mutate(out, "--no-cache", "--shard", f"{k}/2")
    merged = run_cli(["merge", *(out / "results.json" for out in shards), "-o", tmp_path / "merged.json"])
    assert merged.code == 0, merged.stderr
    document = json.loads((tmp_path / "merged.json").read_text())
    mutation = document["mutation"]
    assert mutation["shard"] is None and whole["shard"] is None
    del mutation["duration_s"], whole["duration_s"]  # the only figures that are the clock's
    assert mutation == whole
    assert not any(m["status"] == "not run" for op in mutation["ops"] for m in op["mutants"])
    assert "mutation score" in merged.stderr
    twice = run_cli(
        ["merge", shards[0] / "results.json", shards[0] / "results.json", "-o", tmp_path / "x.json"]
    )
    assert twice.code == 2 and "given twice" in twice.stderr
    alone = run_cli(["merge", tmp_path / "whole" / "results.json", "-o", tmp_path / "y.json"])
    assert alone.code == 2 and "not the document of a shard" in alone.stderr


def test_bad_input_is_a_usage_error(tmp_path: Path) -> None:
    unknown_op = run_cli(["mutate", "--config", PROJECT / "gpuemu.toml", "--out", tmp_path, "--op", "nope"])
    assert unknown_op.code == 2 and "nope" in unknown_op.stderr
    bad_operator = run_cli(["mutate", "--config", PROJECT / "gpuemu.toml", "--operator", "flip_everything"])
    assert bad_operator.code == 2 and "flip_everything" in bad_operator.stderr
    bad_shard = run_cli(["mutate", "--config", PROJECT / "gpuemu.toml", "--shard", "3/2"])
    assert bad_shard.code == 2
