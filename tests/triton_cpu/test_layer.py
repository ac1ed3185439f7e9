"""The GPU-faithful layer over Triton's interpreter (gpuemu_ci/triton_cpu), with real kernels in a real
interpreter: a subprocess with TRITON_INTERPRET=1 (it must be set before Triton is imported) runs each kernel
under `intercepted` and prints what happened; the tests read it."""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

from tests.support_tiers import runs_a_gate
from tests.triton_cpu.support_interpreter import run_interpreted

SCRIPT = textwrap.dedent("""
    import json, sys
    from gpuemu_ci.backends import triton_probe
    triton_probe.watch_imports()
    import numpy as np
    import torch
    import triton
    import triton.language as tl
    import triton.runtime.interpreter as interpreter
    from gpuemu_ci.triton_cpu.layer import CallSettings, KernelFault, intercepted
    from gpuemu_ci.triton_cpu.numerics import round_to_tf32

    @triton.jit
    def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr, MASK_STORE: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        if MASK_STORE:
            tl.store(y_ptr + offs, x * 2, mask=offs < n)
        else:
            tl.store(y_ptr + offs, x * 2)

    @triton.jit
    def rows(x_ptr, y_ptr, M, N, stride, BLOCK: tl.constexpr):
        r = tl.program_id(0)
        c = tl.arange(0, BLOCK)
        tl.store(y_ptr + r * N + c, tl.load(x_ptr + r * stride + c, mask=c < N), mask=c < N)

    @triton.jit
    def masked(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        c = tl.arange(0, BLOCK)
        tl.store(y_ptr + c, tl.load(x_ptr + c, mask=c < n))

    @triton.jit
    def _load_head(ptr, offs, n):
        return tl.load(ptr + offs, mask=offs < n)

    @triton.jit
    def helped(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        c = tl.arange(0, BLOCK)
        tl.store(y_ptr + c, _load_head(x_ptr, c, n))

    @triton.jit
    def dot(a_ptr, b_ptr, c_ptr, N: tl.constexpr, PRECISION: tl.constexpr):
        r = tl.arange(0, N)
        a = tl.load(a_ptr + r[:, None] * N + r[None, :])
        b = tl.load(b_ptr + r[:, None] * N + r[None, :])
        tl.store(c_ptr + r[:, None] * N + r[None, :], tl.dot(a, b, input_precision=PRECISION))

    @triton.jit
    def order(counter_ptr, out_ptr):
        slot = tl.atomic_add(counter_ptr, 1)
        tl.store(out_ptr + slot, tl.program_id(0))

    @triton.jit
    def split_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr, ATOMIC: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        part = tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0)
        if ATOMIC:
            tl.atomic_add(out_ptr, part)
        else:
            tl.store(out_ptr, tl.load(out_ptr) + part)

    @triton.jit
    def flag(out_ptr):
        tl.store(out_ptr, 1)

    @triton.jit
    def tile(x_ptr, y_ptr, M, N, B: tl.constexpr):
        r = tl.program_id(0) * B + tl.arange(0, B)
        c = tl.arange(0, B)
        mask = (r[:, None] < M) and (c[None, :] < N)
        at = r[:, None] * N + c[None, :]
        tl.store(y_ptr + at, tl.load(x_ptr + at, mask=mask) + 1, mask=mask)

    def run(settings, launch):
        with intercepted(settings) as call:
            try:
                launch()
                error = None
            except KernelFault as exc:
                error = str(exc)
        report = call.report()
        return {"error": error, "findings": [list(f) for f in report.findings], "launches": report.launches,
                "dots": list(report.dot_precisions), "undefined": list(report.undefined_lanes),
                "notes": list(report.notes)}

    out = {}
    # an unmasked store on the last program, into a view of a larger buffer: stopped before the write
    buf = torch.full((110,), -7.0)
    x, y = torch.arange(100.0), buf[:100]
    out["oob"] = run(CallSettings(1), lambda: scale[(4,)](x, y, 100, BLOCK=32, MASK_STORE=False))
    out["oob_untouched"] = buf[100:].tolist()
    out["oob_written_before"] = int((y == 2 * x).sum())
    z = torch.empty(100)
    out["oob_past_end"] = run(CallSettings(1), lambda: scale[(4,)](x, z, 100, BLOCK=32, MASK_STORE=False))
    out["clean"] = run(CallSettings(1), lambda: scale[(4,)](x, z, 100, BLOCK=32, MASK_STORE=True))
    out["clean_values"] = bool(torch.equal(z, 2 * x))
    # a row-padded slice: read with its stride (right) and as if contiguous (into the padding)
    padded = torch.arange(4 * 12.0).reshape(4, 12)[:, :10]
    dst = torch.empty(4, 10)
    out["strided_right"] = run(CallSettings(1), lambda: rows[(4,)](padded, dst, 4, 10, 12, BLOCK=16))
    out["strided_right_values"] = bool(torch.equal(dst, padded))
    out["strided_wrong"] = run(CallSettings(1), lambda: rows[(4,)](padded, dst, 4, 10, 10, BLOCK=16))
    # masked lanes without `other`
    for seed in (1, 2):
        for name, dtype in (("f", torch.float32), ("i", torch.int32)):
            src, got = torch.zeros(8, dtype=dtype), torch.zeros(8, dtype=dtype)
            poison = CallSettings(seed, masked_lanes="poison")
            out[f"poison_{name}{seed}"] = run(poison, lambda: masked[(1,)](src, got, 5, BLOCK=8))
            out[f"poison_{name}{seed}_values"] = [str(v) for v in got.tolist()]
    src, got = torch.ones(8), torch.full((8,), 5.0)
    out["zero"] = run(CallSettings(1), lambda: masked[(1,)](src, got, 5, BLOCK=8))
    out["zero_values"] = got.tolist()
    src, got = torch.ones(8), torch.full((8,), 5.0)
    out["helper"] = run(CallSettings(1), lambda: helped[(1,)](src, got, 5, BLOCK=8))
    src, got = torch.zeros(8), torch.zeros(8)
    masked[(1,)](src, got, 5, BLOCK=8)  # outside a call: the plain interpreter
    out["poison_outside"] = got.tolist()
    # tl.dot at each input precision
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(16, 16, generator=g), torch.randn(16, 16, generator=g)
    for precision in ("tf32", "tf32x3", "ieee"):
        c = torch.empty(16, 16)
        out[f"dot_{precision}"] = run(CallSettings(1), lambda: dot[(1,)](a, b, c, N=16, PRECISION=precision))
        exact = a.double() @ b.double()
        a32, b32 = (torch.from_numpy(round_to_tf32(t.numpy())).double() for t in (a, b))
        rounded = a32 @ b32
        out[f"dot_{precision}_error"] = float((c.double() - exact).abs().max())
        out[f"dot_{precision}_tf32_error"] = float((c.double() - rounded).abs().max())
    # program order
    def programs(settings):
        counter, seen = torch.zeros(1, dtype=torch.int32), torch.full((64,), -1, dtype=torch.int32)
        run(settings, lambda: order[(64,)](counter, seen))
        return seen.tolist()
    out["order_first"] = programs(CallSettings(5, 0))
    out["order_again"] = programs(CallSettings(5, 0))
    out["order_rerun"] = programs(CallSettings(5, 1))
    out["order_plain"] = programs(CallSettings(5, 0, sanitize=False))
    # races between programs
    xs = torch.ones(100)
    total = torch.zeros(1)
    out["race"] = run(CallSettings(3), lambda: split_sum[(4,)](xs, total, 100, BLOCK=32, ATOMIC=False))
    total = torch.zeros(1)
    out["atomic"] = run(CallSettings(3), lambda: split_sum[(4,)](xs, total, 100, BLOCK=32, ATOMIC=True))
    out["atomic_total"] = float(total[0])
    out["same_value"] = run(CallSettings(3), lambda: flag[(8,)](torch.zeros(1, dtype=torch.int32)))
    # Python `and` on tensors: elementwise, as on the GPU
    tx, ty = torch.randn(10, 8), torch.zeros(16, 8)
    out["and"] = run(CallSettings(1), lambda: tile[(2,)](tx, ty, 10, 8, B=8))
    out["and_values"] = bool(torch.equal(ty[:10], tx + 1)) and bool((ty[10:] == 0).all())
    ours = [v for m in (tl, tl.core, tl.tensor) for v in vars(m).values()] + [interpreter._patch_lang]
    out["restored"] = interpreter.GridExecutor.__call__.__module__ == "triton.runtime.interpreter" and not any(
        str(getattr(v, "__module__", "")).startswith("gpuemu") for v in ours
    )
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
@runs_a_gate
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_interpreted(SCRIPT, tmp_path_factory.mktemp("layer"))


@pytest.mark.slow
def test_a_store_past_a_views_end_stops_before_writing_and_names_program_tensor_and_distance(
    seen: dict,
) -> None:
    oob = seen["oob"]
    assert oob["error"] is not None
    [(kind, message)] = oob["findings"]
    assert kind == "out_of_bounds"
    assert "store out of bounds in kernel `scale`, program (3, 0, 0) of grid (4, 1, 1)" in message
    assert "kernels.py:" in message and "element offset 100 of `y_ptr` (shape [100], strides [1])" in message
    assert "in bounds of the buffer that holds it, not of the tensor" in message
    assert "28 of 32 active lanes out of bounds" in message
    assert seen["oob_untouched"] == [-7.0] * 10  # nothing landed past the view
    past = seen["oob_past_end"]["findings"][0][1]
    assert "element offset 100 of `y_ptr`" in past and "1 element past its end" in past


def test_a_correct_kernel_runs_unflagged_with_the_same_values(seen: dict) -> None:
    assert seen["clean"] == {**seen["clean"], "error": None, "findings": [], "launches": 1}
    assert seen["clean_values"]


def test_a_row_padded_slice_read_with_its_stride_passes_and_without_it_reads_the_padding(seen: dict) -> None:
    assert seen["strided_right"]["findings"] == [] and seen["strided_right_values"]
    [(kind, message)] = seen["strided_wrong"]["findings"]
    assert kind == "out_of_bounds" and "load out of bounds" in message
    assert "`x_ptr` (shape [4, 10], strides [12, 1])" in message and "not one of its elements" in message


def test_masked_lanes_without_other_read_zero_as_on_nvidia_and_amd_and_their_line_is_noted(
    seen: dict,
) -> None:
    assert seen["zero_values"] == [1.0] * 5 + [0.0] * 3  # a register zeroed before the predicated load
    assert seen["zero"]["findings"] == [] and "kernels.py:" in seen["zero"]["undefined"][0]


def test_a_line_inside_a_jit_helper_is_named_with_the_kernels_line_that_called_it(seen: dict) -> None:
    [site] = seen["helper"]["undefined"]
    helper, _, caller = site.partition(", called at ")
    assert helper.startswith("`helped` at kernels.py:") and helper.endswith("(in _load_head)")
    assert caller.startswith("kernels.py:") and caller.endswith("(in helped)")
    assert "called at" not in seen["zero"]["undefined"][0]  # a line of the kernel itself: named alone


def test_masked_lanes_without_other_are_poisoned_per_seed_in_the_poison_mode(seen: dict) -> None:
    f1, f2 = seen["poison_f1_values"], seen["poison_f2_values"]
    assert f1[:5] == ["0.0"] * 5 and f2[:5] == ["0.0"] * 5
    assert set(f1[5:]) <= {"nan", "inf", "-inf"} and len(set(f1[5:])) == 3
    assert f1[5:] != f2[5:]  # where the NaN/+Inf/-Inf turn starts depends on the seed
    i1, i2 = seen["poison_i1_values"], seen["poison_i2_values"]
    assert all(abs(int(v)) > 2**30 for v in i1[5:] + i2[5:]) and i1[5:] != i2[5:]
    assert seen["poison_f1"]["undefined"] and "kernels.py:" in seen["poison_f1"]["undefined"][0]
    assert seen["poison_outside"][5:] == [0.0, 0.0, 0.0]  # the plain interpreter, outside an op call


def test_fp32_dot_runs_at_its_input_precision_and_says_which(seen: dict) -> None:
    assert seen["dot_tf32"]["dots"] == ["tf32"]
    assert seen["dot_tf32_tf32_error"] < 1e-5 < seen["dot_tf32_error"]  # TF32's inputs, not fp32's
    assert seen["dot_ieee"]["dots"] == ["ieee"] and seen["dot_ieee_error"] < 1e-5
    assert seen["dot_tf32x3"]["dots"] == ["tf32x3"]
    assert seen["dot_tf32x3_error"] < seen["dot_tf32_error"] / 100


def test_programs_run_in_a_seeded_order_and_the_rerun_in_another(seen: dict) -> None:
    first = seen["order_first"]
    assert sorted(first) == list(range(64)) and first != list(range(64))
    assert seen["order_again"] == first
    assert sorted(seen["order_rerun"]) == list(range(64)) and seen["order_rerun"] != first
    assert seen["order_plain"] == list(range(64))  # sanitize = false: the interpreter's own order


def test_split_sums_without_atomics_race_and_with_atomics_do_not(seen: dict) -> None:
    [(kind, message)] = seen["race"]["findings"]
    assert kind == "race" and "kernel `split_sum`" in message and "element offset 0 of `out_ptr`" in message
    assert seen["atomic"]["findings"] == [] and seen["atomic_total"] == 100.0
    assert seen["same_value"]["findings"] == []  # every program storing the same value is no race


def test_python_and_on_tensor_masks_is_elementwise_and_noted(seen: dict) -> None:
    assert seen["and"]["findings"] == [] and seen["and_values"]
    assert "Python `and`/`or` on tensors at kernels.py:" in seen["and"]["notes"][0]
    assert seen["restored"]
