"""The op's outputs cross to the judge once, through an arena; what crosses is checked before anyone reads it."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from gpuemu_ci.backends import WorkerPool
from gpuemu_ci.backends.protocol import OutputDesc
from gpuemu_ci.backends.transport import (
    Arena,
    check_outputs,
    map_arena,
    memory_region,
    place_outputs,
    read_outputs,
)
from tests.backends.support_cases import first_case, op_task


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
    assert memory_region(buf[:0])[1] == 0


def test_outputs_round_trip_through_an_arena_in_every_dtype() -> None:
    arrays = [
        (np.arange(10) % 3).astype(dtype)[1::3].copy()
        for dtype in ("float16", "float32", "float64", "int8", "uint32", "int64", "bool")
    ]
    arrays += [
        np.array([1.0, -2.5, 3.140625], dtype=ml_dtypes.bfloat16),
        np.ones((0, 3)),
        np.float32(2.5) * np.ones(()),
    ]
    arena = Arena(1 << 16)
    try:
        writer = map_arena(os.dup(arena.fd), arena.size)
        descs, end = place_outputs(writer, 0, arrays)
        writer.close()
        assert all(d.offset % 64 == 0 for d in descs) and end <= arena.size
        check_outputs(descs, arena.size)
        reader = map_arena(os.dup(arena.fd), arena.size)
        back = read_outputs(reader, descs)
        reader.close()
    finally:
        arena.close()
    for original, copy in zip(arrays, back, strict=True):
        assert copy.dtype == original.dtype and copy.shape == original.shape
        assert copy.tobytes() == original.tobytes()


@pytest.mark.parametrize(
    ("desc", "words"),
    [
        (OutputDesc("object", (2,), 16, 0), "cannot cross processes"),
        (OutputDesc("no-such-dtype", (2,), 16, 0), "is not a dtype"),
        (OutputDesc("float32", (2,), 16, 0), "cannot have 16 bytes"),
        (OutputDesc("float32", (-1,), -4, 0), "is not a shape"),
        (OutputDesc("float32", (4,), 16, 1 << 20), "lies outside the arena"),
        (OutputDesc("float32", (4,), 16, 3), "lies outside the arena"),  # misaligned
    ],
)
def test_descriptors_that_do_not_describe_an_array_in_the_arena_are_refused(
    desc: OutputDesc, words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        check_outputs([desc], 1 << 16)


def test_an_arena_has_no_name_and_grows() -> None:
    arena = Arena(100)
    try:
        assert arena.size >= 100 and arena.size % mmap.PAGESIZE == 0
        assert os.readlink(f"/proc/self/fd/{arena.fd}").startswith(
            ("/memfd:", "memfd:")
        ) or not os.path.isdir("/proc/self/fd")
        arena.resize(10 << 20)
        assert os.fstat(arena.fd).st_size == arena.size >= 10 << 20
    finally:
        arena.close()


def test_outputs_larger_than_the_first_arena_reach_the_judge(pool: WorkerPool, user_root: Path) -> None:
    task = op_task(
        user_root,
        "backend_ops:big",
        "backend_ops:big_ref",
        extra='family = "elementwise"\ndeterministic = true',
    )
    report = pool.run(task, first_case(task))
    assert report.outcome == "passed", report.message  # 4 MiB twice: the op asked for a larger arena


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int8", "uint32", "int64", "bool"])
def test_exact_outputs_cross_unchanged_in_every_dtype(pool: WorkerPool, user_root: Path, dtype: str) -> None:
    task = op_task(
        user_root,
        "backend_ops:identity",
        "backend_ops:ref_identity",
        schema='[ops.dims]\nN = { min = 1, max = 300, typical = [64] }\n[ops.inputs]\nx = ["N"]\n',
        extra='family = "exact"',
        dtypes=f'["{dtype}"]',
    )
    for n in range(4):
        report = pool.run(task, first_case(task, n))
        assert report.outcome == "passed", report.message


def test_empty_inputs_and_outputs(pool: WorkerPool, user_root: Path) -> None:
    task = op_task(
        user_root,
        "backend_ops:identity",
        "backend_ops:ref_identity",
        schema='[ops.dims]\nN = { min = 0, max = 3, typical = [0] }\n[ops.inputs]\nx = ["N"]\n',
        extra='family = "exact"',
    )
    shapes = set()
    for n in range(6):
        report = pool.run(task, first_case(task, n))
        assert report.outcome == "passed", report.message
        shapes.add(report.shapes["x"])
    assert (0,) in shapes
