"""cuda-kernel-verifier's decorator as a drop-in: the README's calls with their signatures, on CPU tensors."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gpuemu_ci.compat.cuda_kernel_verifier import (  # noqa: E402
    EquivalenceChecker,
    ExponentialRunningCentroidExecutionOutlierDetector,
    FailureCallbackArgs,
    equivalent,
)


@pytest.fixture(autouse=True)
def _checker_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.chdir(tmp_path)  # captures go to ./gpuemu-captures
    monkeypatch.setattr(EquivalenceChecker, "_checkers", [])
    yield
    EquivalenceChecker._running = False


def test_a_torch_ground_truth_gets_torch_tensors_and_a_correct_kernel_passes() -> None:
    seen: list[object] = []

    def ground_truth(x):
        seen.append(type(x))
        return x.sum(dim=1)  # torch-style: would raise on a NumPy array

    mismatches: list[FailureCallbackArgs] = []

    @equivalent(ground_truth, mismatches.append, rtol=1e-1, atol=1e-6)
    def row_sum(x):
        return torch.sum(x, dim=1)

    EquivalenceChecker.start(execution_sample_probability=1.0)
    for _ in range(4):
        row_sum(torch.randn(16, 64))
    EquivalenceChecker.stop()
    stats = row_sum.equivalence.stats  # type: ignore[attr-defined]
    assert stats.checked == 4 and stats.failures == 0 and stats.reference_errors == 0
    assert set(seen) == {torch.Tensor} and mismatches == []


def test_a_wrong_kernel_calls_back_with_the_two_results() -> None:
    mismatches: list[FailureCallbackArgs] = []

    @equivalent(lambda x: x.sum(dim=1), mismatches.append, rtol=1e-3, atol=1e-6)
    def row_sum(x):
        return x[:, :-1].sum(dim=1)  # drops the last column: a tail bug

    EquivalenceChecker.start(execution_sample_probability=1.0)
    row_sum(torch.randn(8, 33))
    EquivalenceChecker.stop()
    (args,) = mismatches
    assert isinstance(args.original_result, torch.Tensor) and isinstance(
        args.ground_truth_result, torch.Tensor
    )
    assert args.original_result.shape == args.ground_truth_result.shape == (8,)


def test_a_raising_ground_truth_is_a_reference_error_not_the_kernel_failing() -> None:
    def broken_ground_truth(x):
        raise RuntimeError("ground truth bug")

    @equivalent(broken_ground_truth, lambda args: pytest.fail("the kernel was blamed"))
    def row_sum(x):
        return x.sum(dim=1)

    EquivalenceChecker.start(execution_sample_probability=1.0)
    for _ in range(3):
        row_sum(torch.randn(4, 8))
    EquivalenceChecker.stop()
    stats = row_sum.equivalence.stats  # type: ignore[attr-defined]
    assert stats.failures == 0 and stats.reference_errors == 3
    assert "ground truth bug" in (stats.last_error or "")


def test_an_autograd_function_ground_truth_mirrors_ctx() -> None:
    contexts: list[object] = []

    def sum_ground_truth(ctx, x):
        contexts.append(ctx)
        ctx.save_for_backward(x)  # harmless: a stand-in, not the real context
        return x.sum(dim=1)

    class FastRowSum(torch.autograd.Function):  # type: ignore[name-defined]
        @staticmethod
        @equivalent(sum_ground_truth, lambda args: pytest.fail("diverged"), rtol=1e-1, atol=1e-6)
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.sum(dim=1)

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad[:, None].expand_as(x)

    EquivalenceChecker.start(execution_sample_probability=1.0)
    x = torch.randn(4, 16, requires_grad=True)
    FastRowSum.apply(x).sum().backward()
    EquivalenceChecker.stop()
    assert len(contexts) == 1 and x.grad is not None and torch.equal(x.grad, torch.ones(4, 16))


def test_nothing_is_checked_before_start_and_a_callback_error_surfaces_at_stop() -> None:
    def on_mismatch(args: FailureCallbackArgs) -> None:
        raise AssertionError("Kernel diverged!")

    @equivalent(lambda x: x * 2, on_mismatch)
    def double(x):
        return x * 3

    double(torch.ones(4))
    assert double.equivalence.stats.calls == 0  # type: ignore[attr-defined]
    EquivalenceChecker.start(execution_sample_probability=1.0)
    double(torch.ones(4))
    with pytest.raises(AssertionError, match="Kernel diverged!"):
        EquivalenceChecker.stop()
    assert not EquivalenceChecker.is_running()


def test_custom_outlier_detector_and_sampling_controls() -> None:
    detector = ExponentialRunningCentroidExecutionOutlierDetector(
        percentile=0.99, outlier_threshold=0.9, exponential_alpha=5e-3
    )

    @equivalent(lambda x: x + 1, outlier_detector=detector)
    def add_one(x):
        return x + 1

    EquivalenceChecker.start(execution_sample_probability=0.0)
    for _ in range(20):
        add_one(torch.ones(8))
    add_one(torch.full((8,), 1e6))  # far from every earlier call
    EquivalenceChecker.set_execution_sample_probability(0.25)
    EquivalenceChecker.stop()
    reasons = add_one.equivalence.stats.reasons  # type: ignore[attr-defined]
    assert reasons.get("first call") == 1 and reasons.get("outlier inputs", 0) >= 1
    with pytest.raises(Exception, match="execution_sample_probability"):
        EquivalenceChecker.start(execution_sample_probability=1.5)
