"""Keeps the bug corpus (bench/corpus/) honest in CI: it covers what it claims, a few correct kernels pass the
quick suite, a few buggy ones are caught for the reason the corpus names, and the one-shape baseline misses
what only fuzzed shapes and values reveal. The full 5-seed score is `python bench/corpus_score.py`."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

from gpuemu_ci.config.load import load_config

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "bench" / "corpus" / "gpuemu.toml"

CONTROLS = (
    "softmax.control",
    "softmax.hn.two_pass",
    "matmul.hn.split_k",
    "attention.hn.two_pass",
    "transpose.control",
)
# Each bug with the failure kind that must catch it.
BUGS = {
    "softmax.bug.tail_mask_leak": "mismatch",
    "matmul.bug.acc_assign": "mismatch",
    "argmax.bug.max_init_zero": "mismatch",
    "silu_mul.bug.truncating_bf16_store": "bias",
    "cumsum.bug.writes_into_input": "inputs_modified",
    "splitk_gemm.bug.nondeterministic": "nondeterministic",
    "transpose.bug.unwritten_out_buffer": "unwritten",
}
# Backward entries (torch ops: `backward = true`), run where torch is installed.
BACKWARD_CONTROLS = ("swiglu_bwd.control",)
BACKWARD_BUGS = {"softmax_xent.bug.grad_missing_chain_term": "mismatch"}
# Scatter-add backward passes (issue #32): PyTorch's own 16-bit accumulation and the other tie routing pass.
SCATTER_CONTROLS = (
    "embedding_bwd.control",
    "embedding_bwd.hn.torch_autograd",
    "max_pool_bwd.control",
    "max_pool_bwd.hn.last_of_ties",
    "max_pool_bwd.hn.torch_autograd",
)
SCATTER_BUGS = {
    "embedding_bwd.bug.grad_scatter_assign": "mismatch",
    "max_pool_bwd.bug.grad_index_without_stride": "mismatch",
}


def _load_module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class body runs
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def scorer() -> ModuleType:
    return _load_module(REPO / "bench" / "corpus_score.py", "corpus_score_under_test")


def test_corpus_covers_every_bug_class_with_controls(scorer: ModuleType) -> None:
    entries = scorer.parse_entries(load_config(CORPUS))
    assert scorer.check_corpus(entries) == []
    ops = {e.op for e in entries}
    assert len(ops) >= 20
    for op in ops:
        roles = [e.role for e in entries if e.op == op]
        assert roles.count("control") == 1, op
        assert "bug" in roles, op
    assert sum(e.role == "hn" for e in entries) >= len(ops)  # hard negatives: other orders, splits, blocks


@pytest.mark.parametrize(
    ("name", "message"),
    [("softmax.bug.not_a_class", "unknown bug class"), ("softmax.fixed", "expected <op>.control")],
)
def test_entry_names_outside_the_convention_are_rejected(scorer: ModuleType, name: str, message: str) -> None:
    config = load_config(CORPUS)
    renamed = replace(config, ops=(replace(config.ops[0], name=name),))
    with pytest.raises(ValueError, match=message):
        scorer.parse_entries(renamed)


@pytest.mark.slow
def test_quick_suite_passes_controls_and_catches_bugs(tmp_path: Path) -> None:
    check_quick_suite(tmp_path, CONTROLS, BUGS)


@pytest.mark.slow
def test_quick_suite_passes_backward_controls_and_catches_backward_bugs(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    check_quick_suite(tmp_path, BACKWARD_CONTROLS, BACKWARD_BUGS)


@pytest.mark.slow
def test_quick_suite_passes_scatter_add_backward_controls_and_catches_their_bugs(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    check_quick_suite(tmp_path, SCATTER_CONTROLS, SCATTER_BUGS)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_vocabulary_loop_summed_to_one_loss_is_caught_on_every_seed(tmp_path: Path, seed: int) -> None:
    """Issue #44: the vocabulary is a dim no output keeps (one scalar loss) and no input's last (the weight is
    [V, H]); the quick suite must still draw it past the 16384-row chunk in every dtype (it never did: the cap
    shrank it to 8192 on 5 of 5 seeds)."""
    check_quick_suite(
        tmp_path,
        ("linear_xent_sum.control",),
        {"linear_xent_sum.bug.vocab_chunk_acc_assign": "mismatch"},
        seed,
    )


def check_quick_suite(tmp_path: Path, controls: tuple[str, ...], bugs: dict[str, str], seed: int = 1) -> None:
    selected = [*controls, *bugs]
    command = [
        sys.executable,
        "-m",
        "gpuemu_ci",
        "run",
        "--config",
        str(CORPUS),
        "--seed",
        str(seed),
        "--out",
        str(tmp_path),
        *[arg for name in selected for arg in ("--op", name)],
    ]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]  # the gate fails: bugs were found
    ops = {op["name"]: op for op in json.loads((tmp_path / "results.json").read_text())["ops"]}
    for name in controls:
        assert ops[name]["status"] == "passed", (name, ops[name]["failures"][:1])
        # 16 quick slots for float32, 8 for float16 and bfloat16, and in each 16-bit dtype one more tile case per
        # varying dim past the eighth slot's, so that every dim reaches its declared max in every dtype
        assert ops[name]["cases_total"] >= 32
    for name, kind in bugs.items():
        assert ops[name]["status"] == "failed", name
        assert kind in {f["kind"] for f in ops[name]["failures"]}, (name, ops[name]["failures"][:1])


@pytest.mark.slow
def test_one_shape_baseline_misses_shape_triggered_bugs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(CORPUS.parent))
    baseline = _load_module(CORPUS.parent / "oneshape_baseline.py", "oneshape_baseline_under_test")
    config = load_config(CORPUS)
    dtypes = ("float32",)
    assert not baseline.judge_entry(config.op("softmax.control"), dtypes, 1).caught
    # The benchmark shape (a power of two) never has a partial tile, and random normal rows are never all
    # negative: the tail-mask leak and the zero-initialised max pass every trial.
    assert not baseline.judge_entry(config.op("softmax.bug.tail_mask_leak"), dtypes, 1).caught
    assert not baseline.judge_entry(config.op("argmax.bug.max_init_zero"), dtypes, 1).caught
    # K = 512 > BLOCK_K: `acc =` is visible even at the benchmark shape.
    assert baseline.judge_entry(config.op("matmul.bug.acc_assign"), dtypes, 1).caught
    # Backward entries get the gradcheck-style comparison: dweight's 64-row blocks summed with `=` are invisible
    # at M = 32, a chain-rule term missing from dx is not.
    pytest.importorskip("torch")
    assert not baseline.judge_entry(config.op("rmsnorm_bwd.control"), dtypes, 1).caught
    assert not baseline.judge_entry(config.op("rmsnorm_bwd.bug.grad_acc_assign"), dtypes, 1).caught
    assert baseline.judge_entry(config.op("rmsnorm_bwd.bug.grad_missing_chain_term"), dtypes, 1).caught


def _run_corpus(tmp_path: Path, suite: str, *names: str, iterations: int | None = None) -> tuple[int, dict]:
    command = [
        sys.executable,
        "-m",
        "gpuemu_ci",
        "run",
        "--config",
        str(CORPUS),
        "--seed",
        "1",
        "--suite",
        suite,
    ]
    command += ["--out", str(tmp_path / suite), *[arg for name in names for arg in ("--op", name)]]
    if iterations is not None:
        command += ["--iterations", str(iterations)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    document = json.loads((tmp_path / suite / "results.json").read_text())
    return done.returncode, {op["name"]: op for op in document["ops"]}


@pytest.mark.slow
def test_a_32_bit_offset_overflow_is_caught_by_the_thorough_suite_only(tmp_path: Path) -> None:
    """Offsets `id * D + d` in int32 wrap past 2^31 elements: the quick suite never draws such a table, the
    thorough suite's large-size class does (or, on a machine without ~9 GiB free, says it could not)."""
    bug = "embedding_int8.bug.int32_offset_overflow"
    code, quick = _run_corpus(tmp_path, "quick", bug)
    assert code == 0 and quick[bug]["status"] == "passed"
    assert "large" not in quick[bug]["dtypes"][0]["coverage"]["size_classes"]
    code, thorough = _run_corpus(tmp_path, "thorough", bug, iterations=2)
    coverage = thorough[bug]["dtypes"][0]["coverage"]
    if coverage["skipped"]:
        assert any("GiB usable here" in reason for reason in coverage["skipped"])
        pytest.skip(f"this machine cannot hold the large case: {coverage['skipped'][0]}")
    assert code == 1 and thorough[bug]["status"] == "failed"
    failure = thorough[bug]["failures"][0]
    assert failure["shapes"]["table"][0] * failure["shapes"]["table"][1] > 2**31
    assert failure["snapshot"] is None  # 2 GiB of inputs: the seed replays them
