"""The vectorised grid (gpuemu_ci/triton_cpu/grid.py): every program of a launch in one pass gives bitwise the
outputs, and the findings, of the per-program interpreter; what does not vectorise runs one program at a time
and says why. Real kernels in Triton's interpreter, in a subprocess (TRITON_INTERPRET=1 before the import)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

from tests.support_tiers import runs_a_gate
from tests.triton_cpu.support_interpreter import ROOT, checkout_env, run_interpreted

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

    @triton.jit
    def skip_ignored(x_ptr, y_ptr, t_ptr, n, BLOCK: tl.constexpr):
        # Liger cross-entropy's shape: a per-row `if` on the target that returns early
        row = tl.program_id(0)
        t = tl.load(t_ptr + row)
        cols = tl.arange(0, BLOCK)
        if t == -100:
            tl.store(y_ptr + row * n + cols, 0.0, mask=cols < n)
            return
        x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=-float("inf"))
        m = tl.max(x, axis=0)
        if m > 1.0:  # a second branch, taken by some of the first one's group
            x = x - m
        tl.store(y_ptr + row * n + cols, x + tl.load(x_ptr + row * n + t), mask=cols < n)

    @triton.jit
    def halving(x_ptr, y_ptr, BLOCK: tl.constexpr):
        # a `while` whose trip count differs between programs
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
        steps = tl.load(x_ptr + pid * BLOCK).to(tl.int32)
        while steps > 0:
            x = x * 0.5 + 1.0
            steps -= 1
        tl.store(y_ptr + offs, x)

    @triton.jit
    def shifted(x_ptr, y_ptr, n, shift, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + offs + shift, mask=offs + shift < n, other=0.0)
        tl.store(y_ptr + offs, v + 1.0, mask=offs < n)
        tl.store(x_ptr + offs, v, mask=offs < n)

    # Accesses the layer's NumPy gather and scatter must leave to the interpreter, and ones whose programs'
    # element ranges overlap without touching the same element (the race watch's per-element path).
    @triton.jit
    def select_two(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        p = tl.where(offs % 3 == 0, x_ptr + offs, y_ptr + offs)  # lanes in two arguments' buffers
        tl.store(out_ptr + offs, tl.load(p) * 2.0)

    @triton.jit
    def as_int64(x_ptr, y_ptr, z_ptr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        pairs = tl.load(x_ptr.to(tl.pointer_type(tl.int64)) + offs)  # 8-byte items of a float32 tensor
        tl.store(y_ptr + offs, pairs ^ 1)
        tl.store(z_ptr.to(tl.pointer_type(tl.int64)) + offs, pairs + 3)  # and into one

    @triton.jit
    def repeated(x_ptr, y_ptr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        x = tl.load(x_ptr + pid * BLOCK + tl.arange(0, BLOCK))
        tl.store(y_ptr + pid * (BLOCK // 2) + tl.arange(0, BLOCK) // 2, x)  # two lanes an element: last wins

    @triton.jit
    def interleaved(x_ptr, y_ptr, G: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) + G * tl.arange(0, BLOCK)  # every program spans the whole tensor
        tl.store(y_ptr + offs, tl.load(x_ptr + offs) + offs.to(tl.float32))

    @triton.jit
    def wide(x_ptr, y_ptr, BLOCK: tl.constexpr):
        # every program reads the same block and writes one value: its blocks, not its memory, are large
        pid = tl.program_id(0)
        x = tl.load(x_ptr + tl.arange(0, BLOCK))
        v = tl.exp(x * (pid + 1).to(tl.float32) * 0.001)
        tl.store(y_ptr + pid, tl.sum(v * x, axis=0))

    def both(launch, make):
        """(per program, vectorised, vectorised again: a replay of the first's tapes where they hold): outputs as
        bytes, findings, how the launches ran."""
        seen = []
        for vectorise in (False, True, True):
            args = make()
            with intercepted(CallSettings(11, vectorise=vectorise, masked_lanes="poison")) as call:
                try:
                    launch(*args)
                    error = None
                except KernelFault as exc:
                    error = str(exc)
            report = call.report()
            seen.append({"bytes": [a.numpy().tobytes().hex() for a in args], "error": error,
                         "findings": [list(f) for f in report.findings], "vectorised": report.vectorised,
                         "per_program": [list(p) for p in report.per_program],
                         "grouped": [list(g) for g in report.grouped], "replayed": call.replayed,
                         "poisoned": list(report.undefined_lanes), "precisions": list(report.dot_precisions)})
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
    out["select_two"] = both(lambda x, y, o: select_two[(4,)](x, y, o, BLOCK=32),
                             lambda: (torch.randn(128, generator=g.manual_seed(21)),
                                      torch.randn(128, generator=g.manual_seed(22)), torch.zeros(128)))
    out["as_int64"] = both(lambda x, y, z: as_int64[(4,)](x, y, z, BLOCK=16),
                           lambda: (torch.randn(128, generator=g.manual_seed(23)),
                                    torch.zeros(64, dtype=torch.int64), torch.zeros(128)))
    out["repeated"] = both(lambda x, y: repeated[(4,)](x, y, BLOCK=32),
                           lambda: (torch.randn(128, generator=g.manual_seed(24)), torch.zeros(64)))
    out["interleaved"] = both(lambda x, y: interleaved[(4,)](x, y, G=4, BLOCK=32),
                              lambda: (torch.randn(128, generator=g.manual_seed(25)), torch.zeros(128)))
    # 256 programs of a 4,096-element block: 4 MiB a float32 value for the whole grid, 256 KiB within the budget
    import tracemalloc
    default_budget = grid.VALUE_BUDGET_BYTES
    grid.VALUE_BUDGET_BYTES = 256 << 10
    out["budget"] = both(lambda x, y: wide[(256,)](x, y, BLOCK=4096),
                         lambda: (torch.randn(4096, generator=g.manual_seed(11)), torch.zeros(256)))
    peaks = []
    for budget in (default_budget, 256 << 10):
        grid.VALUE_BUDGET_BYTES = budget
        x, y = torch.randn(4096, generator=g.manual_seed(12)), torch.zeros(256)
        with intercepted(CallSettings(11, vectorise=True)):
            tracemalloc.start()
            wide[(256,)](x, y, BLOCK=4096)
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
    grid.VALUE_BUDGET_BYTES = default_budget
    out["peaks"] = peaks
    targets = torch.tensor([3, -100, 7, 0, -100, 29, 12, 5, -100, 1])
    scales = torch.tensor([0.1, 2, 3, 0.1, 2, 0.1, 3, 0.1, 2, 3])  # row maxima below 1 and above
    out["skip_ignored"] = both(lambda x, y, t: skip_ignored[(10,)](x, y, t, 30, BLOCK=32),
                               lambda: (torch.randn(10, 30, generator=g.manual_seed(7)) * scales[:, None],
                                        torch.zeros(10, 30), targets.clone()))
    steps = torch.tensor([3, 0, 3, 1, 2, 1, 0, 3], dtype=torch.float32).repeat_interleave(16)
    out["halving"] = both(lambda x, y: halving[(8,)](x, y, BLOCK=16),
                          lambda: (steps + torch.rand(128, generator=g.manual_seed(8)) * 0.5, torch.zeros(128)))
    many = torch.arange(40, dtype=torch.float32).repeat_interleave(16)
    out["too_many_groups"] = both(lambda x, y: halving[(40,)](x, y, BLOCK=16),
                                  lambda: (many + torch.rand(640, generator=g.manual_seed(9)) * 0.5, torch.zeros(640)))
    # A kernel whose data makes it fall back (a program reads its neighbour's element, which that neighbour
    # overwrites), then launches whose data does not: the first of those runs per program without a try, the
    # next one is tried again and vectorises.
    seen = []
    for vectorise in (False, True):
        x = torch.randn(100, generator=g.manual_seed(10))
        ys = []
        with intercepted(CallSettings(12, vectorise=vectorise, masked_lanes="poison")) as call:
            for shift in (1, 0, 0, 0, 0, 0, 0):
                ys.append(torch.zeros(100))
                shifted[(4,)](x, ys[-1], 100, shift, BLOCK=32)
                report = call.report()
                seen.append([vectorise, report.vectorised, [list(p) for p in report.per_program]])
        seen.append([x.numpy().tobytes().hex()] + [y.numpy().tobytes().hex() for y in ys])
    out["backoff"] = seen
    print(json.dumps(out))
''')


@pytest.fixture(scope="module")
@runs_a_gate
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_interpreted(SCRIPT, tmp_path_factory.mktemp("grid"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "kernel",
    [
        "mixed",
        "tiles",  # 2-D tiles: the programs' element ranges overlap, their elements do not
        "chunks",
        "select_two",  # a pointer into two arguments: placed lane by lane, loaded by the interpreter
        "as_int64",  # 8-byte loads and stores in a 4-byte tensor: by the interpreter
        "repeated",  # a program storing two values to one element: by the interpreter, the last one wins
        "interleaved",  # programs interleaved over one tensor: told apart element by element
        "budget",
    ],
)
def test_a_kernel_without_divergence_runs_vectorised_with_bitwise_the_same_outputs(
    seen: dict, kernel: str
) -> None:
    plain, fast, again = seen[kernel]
    assert fast["vectorised"] == 1 and fast["per_program"] == [] and plain["vectorised"] == 0
    assert fast["bytes"] == plain["bytes"]
    assert fast["findings"] == plain["findings"] == []
    assert_replayed_as_traced(plain, fast, again)


def test_a_grid_whose_blocks_would_pass_the_memory_budget_runs_in_smaller_chunks(seen: dict) -> None:
    """256 programs of a 4,096-element block under a 256 KiB budget run in pieces of 8 programs (bitwise the
    per-program outputs, and replayed: the test above), and the launch's peak memory falls with the budget."""
    unbudgeted, budgeted = seen["peaks"]
    assert unbudgeted > 2 * (4 << 20)  # several 4 MiB values live at once over the whole grid
    assert budgeted < unbudgeted / 8


def assert_replayed_as_traced(plain: dict, fast: dict, again: dict) -> None:
    """The second vectorised launch replayed the first's tapes, with the outputs, findings, notes and counts of
    the per-program run and of the traced one."""
    assert fast["replayed"] == 0 and again["replayed"] == 1
    for what in ("bytes", "error", "findings", "poisoned", "precisions"):
        assert again[what] == fast[what] == plain[what], what
    for what in ("vectorised", "per_program", "grouped"):
        assert again[what] == fast[what], what


@pytest.mark.parametrize(
    ("kernel", "groups"),
    [
        ("first_only", 2),  # `if pid == 0`
        ("ragged", 4),  # `range(tl.load(lengths + row))`: four lengths
        ("skip_ignored", 3),  # ignored rows return early; of the others, rows with a max above 1 shift
        ("halving", 4),  # `while steps > 0` with 0 to 3 steps
    ],
)
def test_programs_that_diverge_run_vectorised_in_groups_that_agree(
    seen: dict, kernel: str, groups: int
) -> None:
    plain, fast, again = seen[kernel]
    assert fast["grouped"] == [[groups, 1]] and fast["per_program"] == []
    assert fast["bytes"] == plain["bytes"] and fast["findings"] == plain["findings"] == []
    assert_replayed_as_traced(plain, fast, again)  # in the same groups


def test_divergence_into_too_many_groups_runs_one_program_at_a_time(seen: dict) -> None:
    plain, fast, again = seen["too_many_groups"]
    why = "a Python `if`/`while` on a value that differs between programs in more than 32 groups of programs"
    assert fast["vectorised"] == 0 and fast["per_program"] == [[why, 1]]
    assert fast["bytes"] == plain["bytes"]
    assert again["bytes"] == plain["bytes"] and again["per_program"] == [[why, 1]] and again["replayed"] == 0


def test_a_kernel_that_fell_back_on_its_data_runs_per_program_directly_then_is_tried_again(
    seen: dict,
) -> None:
    steps = seen["backoff"]
    plain, plain_bytes, fast, fast_bytes = steps[0:7], steps[7], steps[8:15], steps[15]
    assert fast_bytes == plain_bytes  # every launch's outputs, whichever way it ran
    assert all(step[1:] == [0, []] for step in plain)
    race = "programs write what other programs of the launch read or wrote"
    remembered = f"an earlier launch of the kernel could not run vectorised ({race})"
    assert [step[1:] for step in fast] == [  # counts so far in the call, after each launch
        [0, [[race, 1]]],  # shift 1: program p reads what program p+1 overwrites
        [0, [[remembered, 1], [race, 1]]],  # shift 0, not tried for 4 launches
        [0, [[remembered, 2], [race, 1]]],
        [0, [[remembered, 3], [race, 1]]],
        [0, [[remembered, 4], [race, 1]]],
        [1, [[remembered, 4], [race, 1]]],  # tried again: vectorised
        [2, [[remembered, 4], [race, 1]]],
    ]


@pytest.mark.parametrize(
    ("kernel", "why"),
    [
        ("neighbour", "programs write what other programs of the launch read or wrote"),
        ("past_end", "an access out of bounds"),
    ],
)
def test_what_does_not_vectorise_runs_per_program_says_why_and_finds_the_same(
    seen: dict, kernel: str, why: str
) -> None:
    plain, fast, again = seen[kernel]
    assert fast["vectorised"] == 0 and fast["per_program"] == [[why, 1]]
    assert fast["bytes"] == plain["bytes"] and fast["error"] == plain["error"]
    assert fast["findings"] == plain["findings"]
    assert again["replayed"] == 0 and again["per_program"] == fast["per_program"]
    assert again["bytes"] == plain["bytes"] and again["findings"] == plain["findings"]


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
    env = checkout_env()
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
    assert sum(f["replayed_launches"] for f in figures.values()) > 0  # later cases replay earlier tapes
    assert any(f["per_program_launches"] for f in figures.values())


@pytest.mark.slow
def test_liger_cross_entropy_with_ignored_tokens_vectorises_in_groups_with_bitwise_the_same_outputs(
    tmp_path: Path,
) -> None:
    """Liger-Kernel's cross-entropy (bench/field) returns early from a per-row `if` on ignored tokens: every case
    of the quick suite of seed 1, per program and vectorised."""
    pytest.importorskip("liger_kernel")
    report = tmp_path / "grid.json"
    env = checkout_env()
    command = [
        sys.executable, str(ROOT / "bench" / "bench_triton_grid.py"), "--config", str(ROOT / "bench" / "field" /
        "gpuemu.toml"), "--only", "liger_cross_entropy.control", "--seeds", "1", "--json", str(report),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=3600, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    (figures,) = json.loads(report.read_text()).values()
    assert figures["mismatches"] == [] and figures["cases"] > 0
    assert figures["grouped_launches"] > 0 and figures["per_program_launches"] == {}
    assert figures["replayed_launches"] > 0  # a later case replays, in its groups, the tapes of earlier ones
