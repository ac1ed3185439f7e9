"""Shadow checking of real calls: a rare-outlier bug is caught by the outlier gate and missed by a random gate of
the same budget; a correct op is never flagged; captures replay and, pinned in the corpus, keep failing the
gate until the bug is fixed; the checker never gets in the caller's way."""

from __future__ import annotations

import importlib
import json
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from gpuemu_ci.shadow import Shadow, ShadowCheckFailed
from tests.shadow.support_shadow import write_project

torch = pytest.importorskip("torch")


@pytest.fixture
def norms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """(config path, the module with rmsnorm) for a correct (buggy=False) or buggy project."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def make(buggy: bool):
        config = write_project(tmp_path, buggy=buggy)
        sys.modules.pop("norms", None)
        return config, importlib.import_module("norms")

    yield make
    sys.modules.pop("norms", None)


def stream(calls: int, outliers: list[int], seed: int = 0):
    """Batches of N(0, 1) activations; at the positions `outliers`, a batch with a few huge rows (a loss spike)."""
    generator = torch.Generator().manual_seed(seed)
    for index in range(calls):
        x = torch.randn(8, 64, generator=generator)
        if index in outliers:
            x[:2] *= 1000.0
        yield x


def run_stream(shadowed, weight, calls: int, outliers: list[int]) -> None:
    for x in stream(calls, outliers):
        shadowed(x, weight, eps=1e-6)


@pytest.mark.slow
def test_the_outlier_gate_catches_a_rare_outlier_bug_that_a_random_gate_of_the_same_budget_misses(
    norms, tmp_path: Path
) -> None:
    config, module = norms(buggy=True)
    outliers = [300, 720, 1100, 1650]  # 4 spikes in 2,000 calls
    weight = torch.ones(64)
    gated = Shadow("rmsnorm", config=config, probability=0.0, capture_dir=tmp_path / "a", seed=1)
    run_stream(gated(module.rmsnorm), weight, 2000, outliers)
    gated.drain()
    budget = gated.stats.checks
    assert gated.stats.failures >= 3, gated.stats  # caught, within the first spikes
    assert budget <= 40, gated.stats  # a small budget: the first call, the spikes, a few false alarms

    chance = Shadow(
        "rmsnorm", config=config, probability=budget / 2000, outlier_threshold=float("inf"),
        capture_dir=tmp_path / "b", seed=1,
    )  # fmt: skip
    run_stream(chance(module.rmsnorm), weight, 2000, outliers)
    chance.drain()
    assert abs(chance.stats.checks - budget) <= max(10, budget // 2)  # the same budget, roughly
    assert chance.stats.failures == 0, chance.stats  # random checks miss 4 spikes in 2,000


@pytest.mark.slow
def test_a_correct_op_shadowed_for_ten_thousand_calls_gives_no_failure(norms, tmp_path: Path) -> None:
    config, module = norms(buggy=False)
    generator = torch.Generator().manual_seed(7)
    checker = Shadow("rmsnorm", config=config, probability=0.01, capture_dir=tmp_path, seed=2)
    shadowed = checker(module.rmsnorm)
    for index in range(10_000):
        rows, width = (8, 64) if index % 3 else (3, 128)
        scale = 10.0 ** float(torch.randint(-3, 4, (1,), generator=generator))
        x = torch.randn(rows, width, generator=generator) * scale
        weight = torch.rand(width, generator=generator) + 0.5
        shadowed(x, weight, eps=1e-6)
    checker.drain()
    stats = checker.stats
    assert stats.calls == 10_000 and stats.checked >= 100 and stats.failures == 0, stats
    assert stats.internal_errors == 0 and stats.skipped == 0
    assert not any(tmp_path.glob("snapshots/*.npz"))


@pytest.mark.slow
def test_a_capture_replays_and_pinned_in_the_corpus_is_part_of_the_regression_corpus(
    norms, tmp_path: Path, cli
) -> None:
    config, module = norms(buggy=True)
    checker = Shadow("rmsnorm", config=config, probability=0.0, capture_dir=tmp_path / "captures")
    run_stream(checker(module.rmsnorm), torch.ones(64), 400, [300])
    checker.drain()
    (capture,) = list((tmp_path / "captures" / "snapshots").glob("*.npz"))
    replayed = cli(
        "replay", "--config", config, "--snapshot", capture, "--out", tmp_path / "out", cwd=tmp_path
    )
    assert replayed.code == 1 and "REPRODUCED rmsnorm" in replayed.stderr, replayed.stderr
    pinned = cli("corpus", "add", "--config", config, capture, cwd=tmp_path)
    assert pinned.code == 0 and "1 case(s) added" in pinned.stderr
    listed = cli("corpus", "list", "--config", config, cwd=tmp_path)
    assert listed.stdout.startswith("rmsnorm\t") and capture.name in listed.stdout
    again = cli("corpus", "add", "--config", config, capture, cwd=tmp_path)
    assert "0 case(s) added" in again.stderr  # pinned once

    # Every gate run now replays the pinned case before fuzzing: it fails, listed first, named by its origin,
    # with a replay command for the file (the fuzzer's adversarial rows may find the clamp too: fuzzed cases).
    gate = cli("run", "--config", config, "--out", tmp_path / "gate", "--no-lint", cwd=tmp_path)
    assert gate.code == 1, gate.output
    document = json.loads((tmp_path / "gate" / "results.json").read_text())
    (op,) = document["ops"]
    failure, *fuzzed = op["failures"]
    assert all(f["origin"] is None for f in fuzzed)
    pinned_file = tmp_path / "gpuemu-corpus" / "rmsnorm" / capture.name
    assert (
        failure["origin"] == f"corpus:{capture.name}"
        and failure["case_id"] == f"rmsnorm/corpus:{capture.name}"
    )
    assert failure["replay"].endswith(f"--snapshot gpuemu-corpus/rmsnorm/{capture.name}")
    assert op["dtypes"][0]["cases_from_corpus"] == 1 and op["cases_failed"] == 1 + len(fuzzed)
    replay = cli(*failure["replay"].split()[1:], "--out", tmp_path / "again", cwd=tmp_path)
    assert replay.code == 1 and "REPRODUCED rmsnorm" in replay.stderr, replay.stderr
    assert pinned_file.exists()

    # Fixed: the same run passes, the pinned case among its cases.
    (tmp_path / "norms.py").write_text(
        (tmp_path / "norms.py").read_text().replace("BUGGY = True", "BUGGY = False")
    )
    fixed = cli("run", "--config", config, "--out", tmp_path / "fixed", "--no-lint", cwd=tmp_path)
    assert fixed.code == 0, fixed.output
    row = json.loads((tmp_path / "fixed" / "results.json").read_text())["ops"][0]["dtypes"][0]
    assert row["cases_from_corpus"] == 1 and row["cases_failed"] == 0


@pytest.mark.slow
def test_autograd_functions_and_numpy_ops_pass_through_unchanged(norms, tmp_path: Path) -> None:
    config, module = norms(buggy=True)
    checker = Shadow("rmsnorm", config=config, probability=1.0, capture_dir=tmp_path)

    class RmsNorm(torch.autograd.Function):  # type: ignore[name-defined]  # torch: from importorskip
        @staticmethod
        @checker
        def forward(ctx, x, weight, eps=1e-6):
            ctx.save_for_backward(x)
            return module.rmsnorm(x, weight, eps)

        @staticmethod
        def backward(ctx, grad):
            return grad, None, None

    x = torch.randn(4, 64, requires_grad=True)
    out = RmsNorm.apply(x, torch.ones(64), 1e-6)
    assert torch.equal(out, module.rmsnorm(x.detach(), torch.ones(64)))  # the result, unchanged
    out.sum().backward()  # ctx passed through: autograd still works
    checker.drain()
    assert checker.stats.checked == 1 and checker.stats.internal_errors == 0 and checker.stats.failures == 0


def test_the_caller_never_sees_an_error_unless_asked(norms, tmp_path: Path) -> None:
    config, module = norms(buggy=True)
    quiet = Shadow(
        "rmsnorm", config=config, probability=1.0, capture_dir=tmp_path / "q", on_failure=lambda f: None
    )
    shadowed = quiet(module.rmsnorm)
    spike = torch.randn(8, 64) * 1000
    shadowed(spike, torch.ones(64))
    quiet.drain()
    shadowed(spike, torch.ones(64))  # no exception: the failure went to the callback
    assert quiet.stats.failures >= 1

    loud = Shadow(
        "rmsnorm", config=config, probability=1.0, capture_dir=tmp_path / "l", raise_on_failure=True
    )
    loud_op = loud(module.rmsnorm)
    loud_op(spike, torch.ones(64))
    with pytest.raises(ShadowCheckFailed, match="rmsnorm failed"):
        loud.drain()


def test_stop_start_probability_and_a_full_queue_are_counted(norms, tmp_path: Path) -> None:
    config, module = norms(buggy=False)
    checker = Shadow("rmsnorm", config=config, probability=1.0, capture_dir=tmp_path, queue_size=1)
    shadowed = checker(module.rmsnorm)
    checker.stop()
    shadowed(torch.randn(4, 64), torch.ones(64))
    assert checker.stats.calls == 0  # stopped: calls pass straight through
    checker.start()
    busy = threading.Event()  # the checker thread is held on its first check, as a slow reference would
    judge = checker._judged
    checker._judged = lambda *a, **k: (busy.wait(30), judge(*a, **k))[1]  # type: ignore[method-assign]
    for _ in range(200):
        shadowed(torch.randn(4, 64), torch.ones(64))
    busy.set()
    checker.drain()
    assert checker.stats.calls == 200 and checker.stats.drops >= 190  # the one-slot queue overflowed
    assert checker.stats.checks + checker.stats.drops == 200
    checker.set_probability(0.0)
    before = checker.stats.checks
    for _ in range(50):
        shadowed(torch.randn(4, 64), torch.ones(64))
    checker.drain()
    assert checker.stats.checks == before
    with pytest.raises(Exception, match="probability"):
        checker.set_probability(2.0)


@pytest.mark.slow
def test_a_compiled_module_keeps_working_with_the_queueing_outside_the_graph(norms, tmp_path: Path) -> None:
    config, module = norms(buggy=False)
    checker = Shadow("rmsnorm", config=config, probability=1.0, capture_dir=tmp_path)
    shadowed = checker(module.rmsnorm)

    def layer(x, weight):
        return shadowed(x * 2.0, weight) + 1.0

    compiled = torch.compile(layer, backend="eager")
    x, weight = torch.randn(4, 64), torch.ones(64)
    assert torch.allclose(compiled(x, weight), layer(x, weight))
    checker.drain()
    assert checker.stats.checked >= 1 and checker.stats.internal_errors == 0


def test_an_undeclared_op_is_checked_from_arguments(tmp_path: Path) -> None:
    def gelu_ref(x):
        from math import erf, sqrt

        return x * 0.5 * (1 + np.vectorize(erf)(x / sqrt(2)))

    checker = Shadow(reference=gelu_ref, family="elementwise", probability=1.0, capture_dir=tmp_path)
    shadowed = checker(lambda x: torch.nn.functional.gelu(x, approximate="tanh"))  # tanh, not erf: wrong
    for _ in range(5):
        shadowed(torch.linspace(-4, 4, 256))
    checker.drain()
    assert checker.stats.failures >= 1


def test_every_new_shape_is_checked_even_for_tensors_larger_than_the_feature_sample(
    norms, tmp_path: Path
) -> None:
    config, module = norms(buggy=False)
    checker = Shadow("rmsnorm", config=config, probability=0.0, capture_dir=tmp_path)
    shadowed = checker(module.rmsnorm)
    weight = torch.ones(256)
    for rows in (64, 64, 96, 96, 128, 64):  # 16k+ elements each: far more than the detector samples
        shadowed(torch.randn(rows, 256), weight)
    checker.drain()
    assert checker.stats.reasons == {"first call": 1, "new shape or dtype": 2}, checker.stats


def test_an_exception_inside_the_checker_is_counted_said_and_recorded(norms, tmp_path: Path, capsys) -> None:
    """A checker that swallows its own failures reports 0 mismatches on a buggy kernel (issue 51, item 8)."""
    config, module = norms(buggy=True)

    def broken_callback(failure: object) -> None:
        raise RuntimeError("the callback broke")

    with Shadow(
        "rmsnorm", config=config, probability=1.0, capture_dir=tmp_path / "c", on_failure=broken_callback
    ) as checker:
        shadowed = checker(module.rmsnorm)
        for _ in range(3):
            shadowed(torch.randn(8, 64) * 1000, torch.ones(64))
    assert checker.stats.internal_errors == 3 and "RuntimeError: the callback broke" in (
        checker.stats.last_error or ""
    )
    err = capsys.readouterr().err
    assert "the checker itself failed while judging the call (1 call(s) not judged so far" in err
    assert "rmsnorm: 3 call(s) were not judged: the checker itself failed" in err
    lines = [json.loads(line) for line in (tmp_path / "c" / "checker-errors.jsonl").read_text().splitlines()]
    assert [line["count"] for line in lines] == [1, 2, 3] and {line["op"] for line in lines} == {"rmsnorm"}
