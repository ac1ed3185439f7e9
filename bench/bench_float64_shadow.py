"""What the float64 shadow run (gpuemu_ci/triton_cpu/shadow.py, `CallSettings(shadow64=True)`) costs against the
call it shadows: one LayerNorm-like Triton kernel (64 rows of 1024, one program per row) called on the same inputs
under the layer as a gate runs it (vectorised), one program at a time (what the shadow run must do), and with the
shadow, in turn, in one process; best of `--repeats` alternated runs, printed as times and ratios. The shadow
runs only when a failure is being explained, never for a case that is merely judged.

    python bench/bench_float64_shadow.py [--repeats 5] [--rows 64] [--cols 1024]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import triton
import triton.language as tl

from gpuemu_ci.triton_cpu.layer import CallSettings, intercepted


@triton.jit
def _layer_norm(x_ptr, w_ptr, b_ptr, y_ptr, N, eps, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / N
    var = tl.sum(x * x, axis=0) / N - mean * mean
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * N + cols, (x - mean) * rstd * w + b, mask=mask)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--cols", type=int, default=1024)
    args = parser.parse_args()
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    x = 1000.0 + torch.randn(args.rows, args.cols, generator=generator)
    w, b = torch.rand(args.cols, generator=generator), torch.randn(args.cols, generator=generator)
    y = torch.empty_like(x)
    block = triton.next_power_of_2(args.cols)
    modes = {
        "layer, vectorised (a gate's call)": CallSettings(seed=1),
        "layer, one program at a time": CallSettings(seed=1, vectorise=False),
        "layer with the float64 shadow": CallSettings(seed=1, shadow64=True),
    }
    best = dict.fromkeys(modes, float("inf"))
    findings = 0
    for _ in range(args.repeats + 1):  # the first round warms caches (tapes, the language patches)
        for name, settings in modes.items():
            started = time.perf_counter()
            with intercepted(settings) as call:
                _layer_norm[(args.rows,)](x, w, b, y, args.cols, 1e-5, BLOCK=block)
            best[name] = min(best[name], time.perf_counter() - started)
            findings = max(findings, len(call.report().shadow))
    base = best["layer, vectorised (a gate's call)"]
    per_program = best["layer, one program at a time"]
    for name, seconds in best.items():
        print(
            f"{name:40s} {seconds * 1e3:9.1f} ms  {seconds / base:6.2f}x  {seconds / per_program:6.2f}x per program"
        )
    print(f"programs with a finding: {findings} of {args.rows}")


if __name__ == "__main__":
    main()
