"""What the GPU-faithful layer over Triton's interpreter (gpuemu_ci/triton_cpu) costs per op call: each Triton
kernel of the corpus (and Liger-Kernel's, when installed) called on the same inputs with the plain interpreter,
under the layer one program at a time (the checks' cost; target <= 1.3x), under the layer vectorised with
every launch running the kernel's Python (no replay), and under the layer as it runs by default (vectorised,
later launches replayed from the tape of the first: replay.py), in turn, in one process; prints the four times
and the ratios to the plain interpreter.

    TRITON_INTERPRET=1 is set here, before Triton is imported.
    python bench/bench_triton_layer.py [--repeats 5] [--only row_max] [--cpu] [--threads 1]

Torch runs on one thread (`--threads`), as in a worker of `--jobs 2` on a 2-core runner (the pool divides the
cores between its workers): the interpreter copies each tensor argument's storage at every launch, and on a
loaded machine torch's second thread waiting for a core showed up as milliseconds of the caller's CPU time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE / "corpus"), str(HERE / "field")]

from gpuemu_ci.backends import triton_probe  # noqa: E402

triton_probe.watch_imports()

import torch  # noqa: E402

from gpuemu_ci.triton_cpu.layer import CallSettings, intercepted  # noqa: E402

Call = Callable[[], object]


def corpus_calls() -> dict[str, Call]:
    from corpus_kernels import triton_backward as tb
    from corpus_kernels import triton_gpu as k

    g = torch.Generator().manual_seed(0)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    x, w = randn(32, 512), randn(512)

    def rmsnorm_fwd_bwd() -> object:
        xr = x.clone().requires_grad_(True)
        y = tb.rmsnorm(xr, w)
        y.backward(torch.ones_like(y))
        return xr.grad

    return {
        "row_max 16x1000": lambda: k.row_max(randn(16, 1000)),
        "row_max 64x1000": lambda: k.row_max(randn(64, 1000)),  # 64 programs: the fixed cost spread wider
        "scale 4000": lambda: k.scale(randn(4000)),
        "col_sum 64x128": lambda: k.col_sum(randn(64, 128)),
        # programs race on the output: falls back for a reason of its data, every launch
        "col_sum no atomic 64x128": lambda: k.col_sum_no_atomic(randn(64, 128)),
        "row_cumsum 16x500": lambda: k.row_cumsum(randn(16, 500)),
        "matmul 64x64x128": lambda: k.matmul(randn(64, 128), randn(128, 64)),
        "tile_add 100x100": lambda: k.tile_add(randn(100, 100)),
        "rmsnorm fwd+bwd 32x512": rmsnorm_fwd_bwd,
    }


def liger_calls() -> dict[str, Call]:
    try:
        from field_kernels import liger_ops
    except ImportError:
        return {}
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(32, 512, generator=g), torch.randn(512, generator=g)
    logits = torch.randn(16, 4096, generator=g)
    target = torch.randint(0, 4096, (16,), generator=g)
    target[::4] = -100  # ignored tokens: a per-row `if` that returns early (vectorised in 2 groups)
    return {
        "liger cross_entropy 16x4096": lambda: liger_ops.cross_entropy(logits, target),
        "liger rms_norm 32x512": lambda: liger_ops.rms_norm(x, w),
        "liger softmax 32x512": lambda: liger_ops.softmax(x),
        "liger swiglu 32x512": lambda: liger_ops.swiglu(x, x),
    }


CLOCK = {"clock": time.perf_counter}


def timed(call: Call, mode: str) -> float:
    clock = CLOCK["clock"]
    started = clock()
    if mode == "plain":
        call()
    else:
        settings = CallSettings(seed=1, vectorise=mode != "checked", replay=mode == "replay")
        with intercepted(settings):
            call()
    return clock() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument(
        "--threads", type=int, default=1, help="torch's intra-op threads (default 1, as a worker)"
    )
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="time the calls in CPU time (time.thread_time): steadier on a loaded machine",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.cpu:
        CLOCK["clock"] = time.thread_time
    calls = {**corpus_calls(), **liger_calls()}
    if args.only:
        calls = {n: c for n, c in calls.items() if any(o in n for o in args.only)}
    modes = ("plain", "checked", "vectorised", "replay")
    print(
        f"{'op call':<28} {'plain ms':>10} {'checked ms':>11} {'ratio':>6} {'vectorised ms':>14} {'speedup':>8}"
        f" {'replay ms':>10} {'speedup':>8}"
    )
    costs, speedups, replays = [], [], []
    for name, call in calls.items():
        for mode in modes:
            timed(call, mode)  # warm-up: rewriting, imports
        times: dict[str, list[float]] = {mode: [] for mode in modes}
        for _ in range(args.repeats):
            for mode in modes:
                times[mode].append(timed(call, mode))
        p, c, v, r = (statistics.median(times[mode]) for mode in modes)
        costs.append(c / p)
        speedups.append(p / v)
        replays.append(p / r)
        print(
            f"{name:<28} {p * 1e3:>10.1f} {c * 1e3:>11.1f} {c / p:>5.2f}x {v * 1e3:>14.1f} {p / v:>7.1f}x"
            f" {r * 1e3:>10.1f} {p / r:>7.1f}x"
        )
    print(
        f"checks one program at a time: geometric mean {statistics.geometric_mean(costs):.2f}x, worst "
        f"{max(costs):.2f}x; vectorised: geometric mean {statistics.geometric_mean(speedups):.1f}x faster, "
        f"least {min(speedups):.1f}x; replayed: geometric mean {statistics.geometric_mean(replays):.1f}x "
        f"faster, least {min(replays):.1f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
