"""Replaying a traced launch (gpuemu_ci/triton_cpu/replay.py): later launches of a kernel replay the tape of the
first as NumPy, with bitwise the outputs and the findings of the per-program interpreter; a guard with another
outcome (a branch, a loop bound) abandons the replay with memory put back, and the launch runs the vectorised
pass. Real kernels in Triton's interpreter, in a subprocess (TRITON_INTERPRET=1 before the import)."""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

from tests.support_tiers import runs_a_gate
from tests.triton_cpu.support_interpreter import run_interpreted

SCRIPT = textwrap.dedent('''
    import json
    from gpuemu_ci.backends import triton_probe
    triton_probe.watch_imports()
    import torch
    import triton
    import triton.language as tl
    from gpuemu_ci.triton_cpu.layer import CallSettings, KernelFault, intercepted

    @triton.jit
    def row_sum(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n + cols, mask=cols < n)  # no `other`: masked lanes are poisoned
        tl.store(y_ptr + row, tl.sum(tl.where(cols < n, x, 0.0), axis=0))

    @triton.jit
    def accumulate_then_branch(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        y = tl.load(y_ptr + offs, mask=offs < n, other=0.0)
        tl.store(y_ptr + offs, y + tl.load(x_ptr + offs, mask=offs < n, other=0.0), mask=offs < n)
        if n > 40:  # a guard after a store: a replay abandoned here must put y back
            tl.store(y_ptr + offs, y * 3.0, mask=offs < n)

    @triton.jit
    def strided_loop(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for k in range(0, n, BLOCK):
            acc += tl.load(x_ptr + pid * n + k + tl.arange(0, BLOCK), mask=k + tl.arange(0, BLOCK) < n, other=0.0)
        tl.store(y_ptr + pid * BLOCK + tl.arange(0, BLOCK), acc)

    @triton.jit
    def strided_tl_range(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for k in tl.range(0, n, BLOCK):
            acc += tl.load(x_ptr + pid * n + k + tl.arange(0, BLOCK), mask=k + tl.arange(0, BLOCK) < n, other=0.0)
        tl.store(y_ptr + pid * BLOCK + tl.arange(0, BLOCK), acc)

    def _host_sqrt(t):
        # not a jit function: Python reading a value's data, as a shim computing in NumPy does
        from triton.runtime.interpreter import TensorHandle
        return tl.tensor(TensorHandle(t.handle.data ** 0.5, t.handle.dtype), t.type)

    @triton.jit
    def host_sqrt(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, _host_sqrt(tl.load(x_ptr + offs)))

    @triton.jit
    def scaled(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n, other=0.0) * alpha, mask=offs < n)

    @triton.jit
    def repeats(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        # a loop recomputing its invariants (one step each in the tape), integer-overflow checks nothing uses
        # (dropped), and two products that differ only in the sign of a zero (never made one)
        pid = tl.program_id(0)
        for k in range(0, 2):
            offs = pid * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs, mask=offs < n, other=1.0)
            y = x * 0.0 if k == 0 else x * -0.0
            tl.store(y_ptr + (2 * pid + k) * BLOCK + tl.arange(0, BLOCK), y)

    def launches():
        """(name, make inputs, launch): the sequence each mode runs, one op call per launch."""
        g = torch.Generator()
        def rows(n, seed, rows=6):
            return lambda: (torch.randn(rows * n, generator=g.manual_seed(seed)), torch.zeros(rows))
        def pair(n, seed):
            return lambda: (torch.randn(n, generator=g.manual_seed(seed)),
                            torch.randn(n, generator=g.manual_seed(seed + 1)))
        def loop(n, seed):
            return lambda: (torch.randn(4 * n, generator=g.manual_seed(seed)), torch.zeros(4 * 32))
        return [
            ("row_sum n=32", rows(32, 1), lambda x, y: row_sum[(6,)](x, y, 32, BLOCK=32)),
            ("row_sum n=20", rows(20, 2), lambda x, y: row_sum[(6,)](x, y, 20, BLOCK=32)),  # poisoned lanes now
            ("row_sum n=29", rows(29, 3), lambda x, y: row_sum[(6,)](x, y, 29, BLOCK=32)),
            ("row_sum 9 rows", rows(29, 4, 9), lambda x, y: row_sum[(9,)](x, y, 29, BLOCK=32)),
            ("row_sum past end", rows(29, 5), lambda x, y: row_sum[(7,)](x, y, 29, BLOCK=32)),  # row 6 is out
            ("branch n=30", pair(100, 6), lambda x, y: accumulate_then_branch[(4,)](x, y, 30, BLOCK=32)),
            ("branch n=50", pair(100, 8), lambda x, y: accumulate_then_branch[(4,)](x, y, 50, BLOCK=32)),
            ("branch n=60", pair(100, 10), lambda x, y: accumulate_then_branch[(4,)](x, y, 60, BLOCK=32)),
            ("branch n=20", pair(100, 12), lambda x, y: accumulate_then_branch[(4,)](x, y, 20, BLOCK=32)),
            ("loop n=64", loop(64, 14), lambda x, y: strided_loop[(4,)](x, y, 64, BLOCK=32)),
            ("loop n=96", loop(96, 15), lambda x, y: strided_loop[(4,)](x, y, 96, BLOCK=32)),
            ("loop n=90", loop(90, 16), lambda x, y: strided_loop[(4,)](x, y, 90, BLOCK=32)),
            ("loop n=90 again", loop(90, 17), lambda x, y: strided_loop[(4,)](x, y, 90, BLOCK=32)),
            ("tl.range n=64", loop(64, 18), lambda x, y: strided_tl_range[(4,)](x, y, 64, BLOCK=32)),
            ("tl.range n=60", loop(60, 19), lambda x, y: strided_tl_range[(4,)](x, y, 60, BLOCK=32)),
            ("tl.range n=70", loop(70, 20), lambda x, y: strided_tl_range[(4,)](x, y, 70, BLOCK=32)),
            ("host sqrt 1", lambda: (torch.rand(128, generator=g.manual_seed(21)), torch.zeros(128)),
             lambda x, y: host_sqrt[(4,)](x, y, BLOCK=32)),
            ("host sqrt 2", lambda: (torch.rand(128, generator=g.manual_seed(22)), torch.zeros(128)),
             lambda x, y: host_sqrt[(4,)](x, y, BLOCK=32)),
            ("repeats 1", lambda: (torch.randn(100, generator=g.manual_seed(31)), torch.ones(256)),
             lambda x, y: repeats[(4,)](x, y, 100, BLOCK=32)),
            ("repeats 2", lambda: (torch.randn(100, generator=g.manual_seed(32)), torch.ones(256)),
             lambda x, y: repeats[(4,)](x, y, 100, BLOCK=32)),
            ("alpha 2", pair(100, 17), lambda x, y: scaled[(4,)](x, y, 100, 2.0, BLOCK=32)),
            ("alpha 3", pair(100, 17), lambda x, y: scaled[(4,)](x, y, 100, 3.0, BLOCK=32)),
        ]

    out = {}
    for mode, settings in (("per_program", dict(vectorise=False)), ("replay", dict(vectorise=True))):
        seen = {}
        for name, make, launch in launches():
            args = make()
            with intercepted(CallSettings(5, masked_lanes="poison", **settings)) as call:
                try:
                    launch(*args)
                    error = None
                except KernelFault as exc:
                    error = str(exc)
            report = call.report()
            seen[name] = {"bytes": [a.numpy().tobytes().hex() for a in args], "error": error,
                          "findings": [list(f) for f in report.findings], "poisoned": list(report.undefined_lanes),
                          "vectorised": report.vectorised, "replayed": call.replayed}
        out[mode] = seen
    print(json.dumps(out))
''')


@pytest.fixture(scope="module")
@runs_a_gate
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_interpreted(SCRIPT, tmp_path_factory.mktemp("replay"))


@pytest.mark.slow
def test_every_launch_gives_bitwise_the_outputs_and_findings_of_the_per_program_interpreter(
    seen: dict,
) -> None:
    plain, fast = seen["per_program"], seen["replay"]
    assert plain.keys() == fast.keys()
    for name in plain:
        for what in ("bytes", "error", "findings", "poisoned"):
            assert fast[name][what] == plain[name][what], (name, what)


@pytest.mark.parametrize(
    ("launch", "replayed"),
    [
        ("row_sum n=32", 0),  # traced
        ("row_sum n=20", 1),  # n is only in masks: the same tape, now with poisoned lanes
        ("row_sum n=29", 1),
        ("row_sum 9 rows", 1),  # another grid
        ("branch n=30", 0),  # traced: the branch not taken
        ("branch n=50", 0),  # the guard's outcome differs after a store: abandoned, traced again
        ("branch n=60", 1),
        ("branch n=20", 1),  # the first tape (branch not taken) is still kept: tried after the newer one
        ("loop n=64", 0),
        ("loop n=96", 0),  # another trip count
        ("loop n=90", 1),  # a `range`'s guard is the loop it makes: 3 steps from 0 by 32, as for 96
        ("loop n=90 again", 1),
        ("tl.range n=64", 0),
        ("tl.range n=60", 1),  # `tl.range` likewise
        ("tl.range n=70", 0),
        ("host sqrt 1", 0),
        ("host sqrt 2", 0),  # its Python reads a value's data: not traced, vectorised at every launch
        ("repeats 1", 0),
        ("repeats 2", 1),  # bitwise as per program (the first test): the signed zeros kept apart
        ("alpha 2", 0),
        ("alpha 3", 0),  # a float argument is a constant of the tape: another tape
    ],
)
def test_later_launches_replay_the_tape_where_its_guards_hold(seen: dict, launch: str, replayed: int) -> None:
    assert seen["replay"][launch]["replayed"] == replayed
    assert seen["replay"][launch]["vectorised"] == 1


def test_a_launch_out_of_bounds_is_not_replayed_and_is_found_as_without_replay(seen: dict) -> None:
    fast = seen["replay"]["row_sum past end"]
    assert fast["replayed"] == 0 and fast["vectorised"] == 0
    assert [f[0] for f in fast["findings"]] == ["out_of_bounds"]
    assert fast["findings"] == seen["per_program"]["row_sum past end"]["findings"]


def test_poisoned_lanes_seen_only_at_replay_are_named_by_the_kernel_line(seen: dict) -> None:
    poisoned = seen["replay"]["row_sum n=20"]["poisoned"]
    assert poisoned and all("kernels.py" in p for p in poisoned)
