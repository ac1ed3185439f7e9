"""A case's inputs built once in the pool and shipped to both workers (issue #48, backends/shipped_inputs.py):
each worker gets exactly the bytes, layouts and gaps its seed gives, in memory of its own, so an op that
writes into its inputs (or through a view into the gaps around them) is still caught and never reaches the
judge's copy; and every report is the one the workers give when each builds the inputs itself."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpuemu_ci.backends import WorkerPool
from gpuemu_ci.backends.interface import CaseSpec, OpTask
from gpuemu_ci.backends.shipped_inputs import SHIP_ELEMENTS, pack, ship, unpack
from gpuemu_ci.backends.transport import region_of
from gpuemu_ci.config.model import Layout
from gpuemu_ci.fuzz.case import build_case
from gpuemu_ci.fuzz.inputs import inputs_digest
from gpuemu_ci.plan.expand import plan_op
from tests.backends.support_cases import op_task

LAYOUTS = (
    "[ops.dims]\nM = [4, 16]\nN = { min = 1, max = 64, typical = [8] }\n[ops.inputs]\n"
    'a = { dims = ["M", "N"], layouts = ["strided"] }\nb = { dims = ["M", "N"], layouts = ["broadcast"] }\n'
)

# Ops that write into their inputs, and a reference that keeps what it was given (one file per case).
WRITERS = """
import os
import numpy as np

def overwrite(a, b):
    y = a + b
    a[...] = 0.0  # into the input the op was handed
    return y

def through_view(a, b):
    y = a + b
    whole = a.base if a.base is not None else a
    while getattr(whole, "base", None) is not None and isinstance(whole.base, np.ndarray):
        whole = whole.base
    whole.view(np.uint8)[...] = 0  # the whole allocation behind the view, gaps included
    return y

def add(a, b):
    return a + b

def keeping_ref(a, b):
    name = f"seen-{len(os.listdir('seen'))}.npz"
    np.savez(os.path.join("seen", name), a=a, b=b)
    return a + b
"""


def _cases(task: OpTask, count: int) -> list[CaseSpec]:
    return [CaseSpec(ref.seed, ref.index) for ref in plan_op(task.op, 1, task.op.dtypes, count)]


def test_shipped_inputs_are_the_seeds_bytes_in_the_seeds_layouts(user_root: Path) -> None:
    """Every array comes back with the same dtype, shape, strides and offset over a copy of the whole
    allocation it was cut from (the poisoned gaps of a strided view included), writable where it was; the
    digest the two sides compare is unchanged."""
    task = op_task(user_root, "backend_ops:add", schema=LAYOUTS)
    layouts_seen: set[Layout] = set()
    for spec in _cases(task, 24):
        case = build_case(task.op, spec.seed, task.root)
        packed = pack(case)
        assert packed is not None
        shipped = unpack(packed)
        assert inputs_digest(shipped) == inputs_digest(case)
        assert shipped.dims == case.dims and shipped.kwargs == case.kwargs and shipped.layouts == case.layouts
        for name, array in case.arrays.items():
            layouts_seen.add(case.layouts[name].layout)
            got = shipped.arrays[name]
            assert (got.dtype, got.shape, got.strides) == (array.dtype, array.shape, array.strides)
            assert got.flags.writeable == array.flags.writeable
            behind, offset = region_of(array)
            got_behind, got_offset = region_of(got)
            assert behind is not None and got_behind is not None and offset == got_offset
            np.testing.assert_array_equal(got_behind, behind)  # gaps and padding, byte for byte
            assert not np.may_share_memory(got, array)
            np.testing.assert_array_equal(shipped.logical[name], case.logical[name])
    assert {Layout.STRIDED, Layout.BROADCAST} <= layouts_seen


def test_arrays_cut_from_one_allocation_share_it_after_shipping() -> None:
    from gpuemu_ci.fuzz.case import CaseInputs

    whole = np.arange(32, dtype=np.float32)
    case = CaseInputs(1, None, {}, {}, {"a": whole[:16]}, {}, {"a": whole[:16], "b": whole[::2]})  # type: ignore[arg-type]
    shipped = unpack(pack(case) or b"")
    assert np.shares_memory(shipped.arrays["a"], shipped.arrays["b"])
    assert np.shares_memory(shipped.arrays["a"], shipped.logical["a"])
    assert pack(case, limit=64) is None  # over the limit: the workers build it themselves


def test_the_pool_leaves_hooks_snapshots_and_overrides_it_cannot_build_to_the_workers(
    user_root: Path, tmp_path: Path
) -> None:
    task = op_task(user_root, "backend_ops:add")
    spec = _cases(task, 1)[0]
    shipped, seconds = ship(task, spec)
    assert shipped.inputs is not None and seconds > 0
    assert unpack(shipped.inputs).seed == spec.seed
    snapshot = CaseSpec(spec.seed, snapshot=tmp_path / "case.npz")
    assert ship(task, snapshot) == (snapshot, 0.0)
    hooked = op_task(
        user_root,
        "backend_ops:add",
        schema="[ops.dims]\nN = [64]\n",
        extra='family = "elementwise"\ninputs = "backend_ops:make_inputs"',
    )
    unchanged, _ = ship(hooked, spec)
    assert unchanged.inputs is None  # the hook is user code: it runs in the workers only
    large = op_task(user_root, "backend_ops:add", schema=f"[ops.dims]\nM = [2]\nN = [{SHIP_ELEMENTS}]\n"
                    '[ops.inputs]\na = ["M", "N"]\nb = ["M", "N"]\n')  # fmt: skip
    unchanged, _ = ship(large, _cases(large, 1)[0])
    assert unchanged.inputs is None  # each worker builds its own copy of a large case, in parallel


@pytest.mark.slow
@pytest.mark.parametrize("writer", ["overwrite", "through_view"])
def test_an_op_writing_into_its_inputs_is_caught_and_the_judge_sees_the_seeds_inputs(
    tmp_path: Path, writer: str
) -> None:
    """The op zeroes its input (or the whole allocation behind a strided view): the case fails as
    `inputs_modified`, and the reference, in the judge's worker, got exactly the seed's values; the same
    report as when each worker builds the inputs itself."""
    (tmp_path / "writers.py").write_text(WRITERS)
    (tmp_path / "seen").mkdir()
    task = op_task(tmp_path, f"writers:{writer}", "writers:keeping_ref", schema=LAYOUTS)
    specs = _cases(task, 3)
    reports = {}
    for ship_inputs in (True, False):
        with WorkerPool(1, tmp_path, gpu=None, ship_inputs=ship_inputs) as pool:
            reports[ship_inputs] = [pool.run(task, spec) for spec in specs]
    seen = sorted((tmp_path / "seen").iterdir(), key=lambda p: int(p.stem.split("-")[1]))
    assert len(seen) == 2 * len(specs)
    for n, spec in enumerate(specs * 2):
        case = build_case(task.op, spec.seed, task.root)
        with np.load(seen[n]) as kept:
            for name in ("a", "b"):
                np.testing.assert_array_equal(kept[name], case.logical[name].astype(np.float64))
    for shipped, built in zip(reports[True], reports[False], strict=True):
        assert shipped.outcome == "failed" and shipped.kind == "inputs_modified", shipped.message
        assert json.dumps(_plain(shipped), sort_keys=True) == json.dumps(_plain(built), sort_keys=True)


def _plain(report: object) -> object:
    import msgspec

    plain = msgspec.to_builtins(report)
    assert isinstance(plain, dict)
    for clock in ("call_s", "phases", "duration_s"):
        plain.pop(clock, None)
    return plain
