"""Inputs reach the op with their exact memory layout; outputs, out= buffers, re-runs and modifications."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from gpuemu_ci.backends import WorkerPool
from gpuemu_ci.backends.interface import CallStatus
from gpuemu_ci.backends.transport import memory_region, plan_inputs
from tests.backends.support_jobs import make_job, pair


def _strided_with_nan_gaps() -> tuple[np.ndarray, np.ndarray]:
    """A (5, 4) view taking every other column of a NaN-poisoned (5, 8) buffer."""
    buf = np.full((5, 8), np.nan, dtype=np.float32)
    view = buf[:, ::2]
    view[...] = np.arange(20, dtype=np.float32).reshape(5, 4)
    return buf, view


def test_memory_region_covers_the_base_buffer() -> None:
    buf, view = _strided_with_nan_gaps()
    start, nbytes, offset = memory_region(view)
    assert (start, nbytes, offset) == (buf.ctypes.data, buf.nbytes, 0)
    inner = buf[1:, 1::2]
    start, nbytes, offset = memory_region(inner)
    assert (start, nbytes, offset) == (buf.ctypes.data, buf.nbytes, 8 * 4 + 4)
    flipped = buf[::-1]
    start, nbytes, offset = memory_region(flipped)
    assert (start, nbytes, offset) == (buf.ctypes.data, buf.nbytes, 4 * 8 * 4)
    empty = buf[:0]
    assert memory_region(empty)[1] == 0


def test_plan_aligns_every_region() -> None:
    descs, total, _ = plan_inputs({"x": np.ones(3, np.int8), "y": np.ones((2, 2))})
    assert all(d.region_offset % 64 == 0 for d in descs)
    assert total >= descs[-1].region_offset + descs[-1].region_nbytes


def test_non_contiguous_inputs_arrive_with_identical_strides(pool: WorkerPool, user_root: Path) -> None:
    _, a = _strided_with_nan_gaps()
    b = np.broadcast_to(np.arange(4, dtype=np.float32), (5, 4))  # stride 0 on axis 0
    run = pool.run(make_job(user_root, "userops:describe", {"a": a, "b": b}))
    assert run.op.status is CallStatus.OK, run.op.message
    strides, shapes = run.op.outputs
    assert tuple(strides) == a.strides + b.strides == (32, 8, 0, 4)
    assert tuple(shapes) == a.shape + b.shape


def test_transposed_and_reversed_views_keep_their_strides(pool: WorkerPool, user_root: Path) -> None:
    base = np.arange(12, dtype=np.float64).reshape(3, 4)
    a, b = base.T, base[::-1, ::-1].T
    run = pool.run(make_job(user_root, "userops:describe", {"a": a, "b": b}))
    assert tuple(run.op.outputs[0]) == a.strides + b.strides == (8, 32, -8, -32)


def test_nan_gaps_between_elements_travel_with_the_view(pool: WorkerPool, user_root: Path) -> None:
    _, a = _strided_with_nan_gaps()
    run = pool.run(make_job(user_root, "userops:with_gaps", {"a": a, "b": np.ones((5, 4), np.float32)}))
    wide = run.op.outputs[0]
    assert wide.shape == (5, 8)
    np.testing.assert_array_equal(wide[:, ::2], a)
    assert np.isnan(wide[:, 1::2]).all()


def test_reference_gets_contiguous_float64_and_exact_values(pool: WorkerPool, user_root: Path) -> None:
    _, a = _strided_with_nan_gaps()
    b = np.broadcast_to(np.float32(0.1), (5, 4))
    run = pool.run(make_job(user_root, "userops:add", {"a": a, "b": b}))
    assert run.reference.status is CallStatus.OK, run.reference.message  # ref_add asserts the contract
    ref = run.reference.outputs[0]
    assert ref.dtype == np.float64
    np.testing.assert_array_equal(ref, a.astype(np.float64) + np.float64(np.float32(0.1)))
    assert run.op.outputs[0].dtype == np.float32


def test_integer_inputs_reach_the_reference_unchanged(pool: WorkerPool, user_root: Path) -> None:
    x = np.arange(-5, 7, dtype=np.int16).reshape(3, 4)[:, ::2]
    run = pool.run(make_job(user_root, "userops:identity", {"x": x}, reference="userops:ref_identity"))
    assert run.reference.outputs[0].dtype == np.int16
    np.testing.assert_array_equal(run.reference.outputs[0], x)
    np.testing.assert_array_equal(run.op.outputs[0], x)


def test_bfloat16_round_trip(pool: WorkerPool, user_root: Path) -> None:
    values = np.array([1.0, -2.5, 3.140625, 1e-38, 65280.0, 0.0078125], dtype=ml_dtypes.bfloat16)
    x = np.zeros(12, dtype=ml_dtypes.bfloat16)
    x[::2] = values
    view = x[::2]
    run = pool.run(make_job(user_root, "userops:identity", {"x": view}, reference="userops:ref_identity"))
    out = run.op.outputs[0]
    assert out.dtype == np.dtype(ml_dtypes.bfloat16)
    assert out.view(np.uint16).tolist() == values.view(np.uint16).tolist()
    ref = run.reference.outputs[0]
    assert ref.dtype == np.float64
    np.testing.assert_array_equal(ref, values.astype(np.float64))


def test_empty_and_zero_dim_inputs(pool: WorkerPool, user_root: Path) -> None:
    x = np.ones((0, 3), np.float32)
    run = pool.run(make_job(user_root, "userops:sum_rows", {"x": x}, reference="userops:sum_rows"))
    assert run.op.status is CallStatus.OK and run.op.outputs[0].shape == (0,)
    s = np.array(2.5, dtype=np.float32)
    run = pool.run(make_job(user_root, "userops:identity", {"x": s}, reference="userops:ref_identity"))
    assert run.op.outputs[0].shape == () and float(run.op.outputs[0]) == 2.5


def test_inputs_modified_is_detected_and_rerun_gets_fresh_inputs(pool: WorkerPool, user_root: Path) -> None:
    inputs = pair()
    original = inputs["a"].copy()
    run = pool.run(make_job(user_root, "userops:scribble", inputs, rerun_for_determinism=True))
    assert run.inputs_modified == ("a",)
    np.testing.assert_array_equal(inputs["a"], original)  # the caller's arrays are never touched
    assert run.rerun is not None
    np.testing.assert_array_equal(run.rerun.outputs[0], run.op.outputs[0])  # same inputs both times
    clean = pool.run(make_job(user_root, "userops:add", pair()))
    assert clean.inputs_modified == ()


def test_writes_into_gaps_count_as_modifications(pool: WorkerPool, user_root: Path) -> None:
    _, a = _strided_with_nan_gaps()
    b = np.ones((5, 4), np.float32)
    run = pool.run(make_job(user_root, "userops:poke_gap", {"a": a, "b": b}))
    assert run.op.status is CallStatus.OK
    assert run.inputs_modified == ("a",)


def test_out_arg_gets_a_nan_prefilled_buffer(pool: WorkerPool, user_root: Path) -> None:
    full = pool.run(make_job(user_root, "userops:into_out", pair(), out_arg="out"))
    assert full.op.status is CallStatus.OK, full.op.message
    np.testing.assert_array_equal(full.op.outputs[0], pair()["a"] + 1)
    assert full.op.outputs[0].dtype == np.float32  # the first float input's dtype
    partial = pool.run(
        make_job(user_root, "userops:into_out_partial", pair(), out_arg="out", out_dtype="float64")
    )
    out = partial.op.outputs[0]
    assert out.dtype == np.float64
    assert np.isnan(out[-1]).all() and not np.isnan(out[:-1]).any()


def test_determinism_rerun_exposes_a_nondeterministic_op(pool: WorkerPool, user_root: Path) -> None:
    run = pool.run(make_job(user_root, "userops:nondeterministic", pair(), rerun_for_determinism=True))
    assert run.rerun is not None and run.rerun.status is CallStatus.OK
    assert not np.array_equal(run.op.outputs[0], run.rerun.outputs[0])
    np.testing.assert_array_equal(run.rerun.outputs[0] - run.op.outputs[0], 1.0)


def test_reference_on_absolute_inputs(pool: WorkerPool, user_root: Path) -> None:
    inputs = {"a": -np.arange(6, dtype=np.float32).reshape(2, 3), "b": -np.ones((2, 3), np.float32)}
    run = pool.run(make_job(user_root, "userops:add", inputs, abs_reference_inputs=("a",)))
    assert run.reference_abs is not None and run.reference_abs.status is CallStatus.OK
    np.testing.assert_array_equal(run.reference_abs.outputs[0], np.arange(6).reshape(2, 3) - 1.0)
    np.testing.assert_array_equal(run.reference.outputs[0], -np.arange(6).reshape(2, 3) - 1.0)


def test_large_outputs_use_raw_frames(pool: WorkerPool, user_root: Path) -> None:
    a = np.random.default_rng(1).standard_normal((512, 300)).astype(np.float32)  # 600 KB per output
    run = pool.run(
        make_job(user_root, "userops:add", {"a": a, "b": a.T.copy().T}, rerun_for_determinism=True)
    )
    np.testing.assert_array_equal(run.op.outputs[0], a + a)
    np.testing.assert_array_equal(run.reference.outputs[0], a.astype(np.float64) * 2)
    assert run.rerun is not None and run.rerun.outputs[0].flags.writeable


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "uint32", "int64", "bool"])
def test_dtypes_round_trip(pool: WorkerPool, user_root: Path, dtype: str) -> None:
    x = (np.arange(10) % 3).astype(dtype)[1::3]
    run = pool.run(make_job(user_root, "userops:identity", {"x": x}, reference="userops:ref_identity"))
    assert run.op.outputs[0].dtype == x.dtype
    np.testing.assert_array_equal(run.op.outputs[0], x)
