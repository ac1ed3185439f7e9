"""The vectorised grid (gpuemu_ci/triton_cpu/grid.py): every program of a launch in one pass gives bitwise the
outputs, and the findings, of the per-program interpreter; what does not vectorise runs one program at a time
and says why. Real kernels in Triton's interpreter, in a subprocess (TRITON_INTERPRET=1 before the import)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent('''
    import json
    from gpuemu_ci.backends import triton_probe
    triton_probe.watch_imports()
    import numpy as np
    import torch
    import triton
    import triton.language as tl
    from gpuemu_ci.triton_cpu import grid
    from gpuemu_ci.triton_cpu.layer import CallSettings, KernelFault, intercepted

    @triton.jit
    def mixed(x_ptr, y_ptr, idx_ptr, s_ptr, N, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=-float("inf"))
        m, i = tl.max(x, axis=0, return_indices=True)
        tl.store(idx_ptr + row, i)
        e = tl.exp(x - m)
        c = tl.cumsum(tl.where(cols < N, e, 0.0), axis=0)
        tl.store(y_ptr + row * N + cols, c / tl.sum(tl.where(cols < N, e, 0.0), axis=0), mask=cols < N)
        t = tl.reshape(tl.where(cols < N, x, 0.0), (4, BLOCK // 4))
        tl.store(s_ptr + row, tl.sum(tl.sum(tl.trans(t) * 2.0, axis=1), axis=0))

    @triton.jit
    def tiles(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            rk = k + tl.arange(0, BK)
            a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
            b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc += tl.dot(a, b)
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=mask)

    @triton.jit
    def first_only(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        if pid == 0:
            x = x * 10
        tl.store(y_ptr + offs, x, mask=offs < n)

    @triton.jit
    def ragged(x_ptr, y_ptr, lengths_ptr, W: tl.constexpr):
        row = tl.program_id(0)
        acc = tl.zeros((W,), dtype=tl.float32)
        for k in range(0, tl.load(lengths_ptr + row)):
            acc += tl.load(x_ptr + row * 8 * W + k * W + tl.arange(0, W))
        tl.store(y_ptr + row * W + tl.arange(0, W), acc)

    @triton.jit
    def neighbour(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        right = tl.load(x_ptr + offs + 1, mask=offs + 1 < n, other=0.0)
        tl.store(x_ptr + offs, right, mask=offs < n)

    @triton.jit
    def past_end(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n, other=0.0))

    @triton.jit
    def tiny(x_ptr, y_ptr):
        pid = tl.program_id(0)
        tl.store(y_ptr + pid, tl.load(x_ptr + pid) * 3 + pid)

    def both(launch, make):
        """(per program, vectorised): outputs as bytes, findings, how the launches ran."""
        seen = []
        for vectorise in (False, True):
            args = make()
            with intercepted(CallSettings(11, vectorise=vectorise)) as call:
                try:
                    launch(*args)
                    error = None
                except KernelFault as exc:
                    error = str(exc)
            report = call.report()
            seen.append({"bytes": [a.numpy().tobytes().hex() for a in args], "error": error,
                         "findings": [list(f) for f in report.findings], "vectorised": report.vectorised,
                         "per_program": [list(p) for p in report.per_program]})
        return seen

    g = torch.Generator().manual_seed(0)
    out = {}
    out["mixed"] = both(lambda x, y, i, s: mixed[(7,)](x, y, i, s, 30, BLOCK=32),
                        lambda: (torch.randn(7, 30, generator=g.manual_seed(1)), torch.zeros(7, 30),
                                 torch.zeros(7, dtype=torch.int32), torch.zeros(7)))
    out["tiles"] = both(lambda a, b, c: tiles[(3, 2)](a, b, c, 70, 40, 50, BM=32, BN=32, BK=16),
                        lambda: (torch.randn(70, 50, generator=g.manual_seed(2)),
                                 torch.randn(50, 40, generator=g.manual_seed(3)), torch.zeros(70, 40)))
    out["first_only"] = both(lambda x, y: first_only[(5,)](x, y, 150, BLOCK=32),
                             lambda: (torch.randn(150, generator=g.manual_seed(4)), torch.zeros(150)))
    out["ragged"] = both(lambda x, y, l: ragged[(4,)](x, y, l, W=16),
                         lambda: (torch.randn(4 * 8 * 16, generator=g.manual_seed(5)), torch.zeros(4 * 16),
                                  torch.tensor([1, 8, 3, 5], dtype=torch.int32)))
    out["neighbour"] = both(lambda x: neighbour[(4,)](x, 100, BLOCK=32),
                            lambda: (torch.arange(100.0),))
    out["past_end"] = both(lambda x, y: past_end[(4,)](x, y, 100, BLOCK=32),
                           lambda: (torch.arange(100.0), torch.zeros(100)))
    n = grid.CHUNK_PROGRAMS * 2 + 5
    out["chunks"] = both(lambda x, y: tiny[(n,)](x, y),
                         lambda: (torch.randn(n, generator=g.manual_seed(6)), torch.zeros(n)))
    print(json.dumps(out))
''')


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict:
    script = tmp_path_factory.mktemp("grid") / "kernels.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("kernel", ["mixed", "tiles", "chunks"])
def test_a_kernel_without_divergence_runs_vectorised_with_bitwise_the_same_outputs(
    seen: dict, kernel: str
) -> None:
    plain, fast = seen[kernel]
    assert fast["vectorised"] == 1 and fast["per_program"] == [] and plain["vectorised"] == 0
    assert fast["bytes"] == plain["bytes"]
    assert fast["findings"] == plain["findings"] == []


@pytest.mark.parametrize(
    ("kernel", "why"),
    [
        ("first_only", "a Python `if`/`while` on a value that differs between programs"),
        ("ragged", "a loop bound or index on a value that differs between programs"),
        ("neighbour", "programs write what other programs of the launch read or wrote"),
        ("past_end", "an access out of bounds"),
    ],
)
def test_what_does_not_vectorise_runs_per_program_says_why_and_finds_the_same(
    seen: dict, kernel: str, why: str
) -> None:
    plain, fast = seen[kernel]
    assert fast["vectorised"] == 0 and fast["per_program"] == [[why, 1]]
    assert fast["bytes"] == plain["bytes"] and fast["error"] == plain["error"]
    assert fast["findings"] == plain["findings"]


def test_the_findings_of_a_fallen_back_launch_are_real(seen: dict) -> None:
    assert [f[0] for f in seen["neighbour"][1]["findings"]] == ["race"]
    assert [f[0] for f in seen["past_end"][1]["findings"]] == ["out_of_bounds"]


@pytest.mark.slow
def test_every_triton_op_of_the_corpus_gives_bitwise_the_same_outputs_on_every_case_of_3_seeds(
    tmp_path: Path,
) -> None:
    """bench/bench_triton_grid.py over the corpus's Triton ops (the sanitizer's kernels and the fused RMSNorm
    forward and backward): every case of the quick suite of master seeds 1-3, per program and vectorised."""
    report = tmp_path / "grid.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_triton_grid.py"), "--seeds", "3", "--json", str(report)],
        capture_output=True, text=True, env=env, timeout=3600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    figures = json.loads(report.read_text())
    assert {name.split(".")[0] for name in figures} >= {
        "tri_row_max", "tri_scale", "tri_col_sum", "tri_row_cumsum", "tri_matmul", "tri_tile_add",
        "rmsnorm_triton_bwd",
    }  # fmt: skip
    assert all(f["mismatches"] == [] and f["cases"] > 0 for f in figures.values())
    assert sum(f["vectorised_launches"] for f in figures.values()) > 0
    assert any(f["per_program_launches"] for f in figures.values())
