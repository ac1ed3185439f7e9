"""`minimize` moves only to cases that fail the same way: a mismatch never becomes a NaN or a crash on the way
down, and what it reports says what changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuemu_ci.backends.interface import CaseSpec
from gpuemu_ci.config.load import load_config
from gpuemu_ci.pipeline.minimize import minimize
from gpuemu_ci.pipeline.session import Session
from gpuemu_ci.pipeline.settings import RunOptions

# Every test here takes seconds (whole runs, real processes): the fast tier (-m "not slow") leaves them out.
pytestmark = pytest.mark.slow

CONFIG = """
[project]
name = "shrink"

[[ops]]
name = "off_by_one"
op = "shrink_ops:off_by_one"
reference = "shrink_ops:same"
family = "elementwise"
[ops.dims]
N = { min = 1, max = 512, typical = [300] }
[ops.inputs]
x = ["N"]
"""

OPS = """
import numpy as np

def same(x):
    return x.copy()

def off_by_one(x):
    # Wrong by one everywhere; short rows give NaN instead (another kind of failure).
    y = x.astype(np.float32) + np.float32(1)
    if x.shape[0] < 40:
        y[:] = np.nan
    return y.astype(x.dtype)
"""


def test_the_failure_kind_is_kept_and_the_result_is_described(tmp_path: Path, make_project) -> None:
    config = load_config(make_project(CONFIG, {"shrink_ops.py": OPS}))
    op = config.op("off_by_one")
    with Session(config, RunOptions(out_dir=tmp_path / "out", jobs=1), gpu=None) as session:
        seed = next(ref.seed for ref in session.plan(op) if _fails_big(session, op, ref))
        result = minimize(session, op, seed, max_runs=80)
    assert result.kind.value == "mismatch"
    assert result.dims["N"] == 40  # the smallest N that still fails the same way (below it: NaN)
    assert (tmp_path / "out" / result.snapshot).is_file()
    words = result.in_words()
    assert f"N {result.original_dims['N']} -> 40" in words and "x9.5" not in words


def _fails_big(session: Session, op, ref) -> bool:
    report = session.run_case(op, CaseSpec(ref.seed, ref.index))
    return report.dims["N"] >= 40 and report.outcome == "failed"


def test_only_the_minimized_snapshot_is_left_beside_what_was_there(tmp_path: Path, make_project) -> None:
    """Each failing candidate on the way down writes a snapshot; minimize keeps the final one (and whatever the
    directory held before), not every intermediate one (issue #27: 6 -> 34 files)."""
    config = load_config(make_project(CONFIG, {"shrink_ops.py": OPS}))
    op = config.op("off_by_one")
    snapshots = tmp_path / "out" / "snapshots"
    snapshots.mkdir(parents=True)
    earlier = snapshots / "0123456789abcdef.npz"
    earlier.write_bytes(b"a snapshot of an earlier run")
    with Session(config, RunOptions(out_dir=tmp_path / "out", jobs=1), gpu=None) as session:
        seed = next(ref.seed for ref in session.plan(op) if _fails_big(session, op, ref))
        kept_by_the_search = set(snapshots.glob("*.npz"))
        result = minimize(session, op, seed, max_runs=80)
    assert result.runs > 2  # it did try intermediate cases
    assert set(snapshots.glob("*.npz")) == kept_by_the_search | {tmp_path / "out" / result.snapshot}
    assert earlier.read_bytes() == b"a snapshot of an earlier run"
