"""What logging stores costs (triton_cpu/where.py), which only the explain re-run of a recorded failure pays now
(CaseSpec.explain, pipeline/explain_rerun.py): a 500x700 fp32 tiled copy (704 programs of 16x32) called under
the layer with the store log off (every case of a run) and on with its outputs mapped to their stores (the
explain re-run's judged call), alternated in one process, one program at a time and vectorised; prints the best
of `--repeats` times of each and their ratio.

    TRITON_INTERPRET=1 is set here, before Triton is imported.
    python bench/bench_store_log.py [--repeats 5]
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

M, N, BM, BN = 500, 700, 16, 32


@triton.jit
def _tiles(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    r = tl.program_id(0) * BM + tl.arange(0, BM)
    c = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (r[:, None] < M) & (c[None, :] < N)
    at = r[:, None] * N + c[None, :]
    tl.store(y_ptr + at, tl.load(x_ptr + at, mask=mask, other=0.0), mask=mask)


def one_call(vectorise: bool, log_stores: bool) -> float:
    x = torch.arange(M * N, dtype=torch.float32).reshape(M, N)
    y = torch.empty_like(x)
    start = time.perf_counter()
    with intercepted(CallSettings(seed=1, vectorise=vectorise, log_stores=log_stores)) as call:
        _tiles[(triton.cdiv(M, BM), triton.cdiv(N, BN))](x, y, M, N, BM=BM, BN=BN)
    if log_stores:
        (stored,) = call.stores.maps([y.numpy()])
        assert stored is not None
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for vectorise in (False, True):
        one_call(vectorise, True)  # warm: the kernel's first launch traces or compiles
        best = {False: float("inf"), True: float("inf")}
        for _ in range(args.repeats):
            for log in (False, True):  # alternated: a slow moment of the machine hits both
                best[log] = min(best[log], one_call(vectorise, log))
        how = "vectorised" if vectorise else "one program at a time"
        print(
            f"{how}: store log off {best[False] * 1e3:.1f} ms, on (with the output mapped) "
            f"{best[True] * 1e3:.1f} ms: {best[True] / best[False]:.3f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
