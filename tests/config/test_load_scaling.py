"""Issue 45, item 7: loading a config is linear in the number of ops (100,000 ops took over 150 s: each op's
table looked for its end among every header line of the file).

Work is counted, not timed: the lines of gpuemu_ci.config's code that run while a config loads (a trace
function counts them). Ten times the ops cost 10.0 times the lines; on the quadratic code 1,000 ops cost about 15
times what 100 do. bench/bench_config_load.py measures the time (100,000 ops against 10,000)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import gpuemu_ci.config
from gpuemu_ci.config.load import load_config
from tests.bench.support import load_script

CONFIG_CODE = str(Path(gpuemu_ci.config.__file__).parent)

BENCH = load_script(
    Path(__file__).resolve().parents[2] / "bench" / "bench_config_load.py", "bench_config_load"
)


def lines_run_loading(root: Path, ops: int) -> int:
    """How many lines of gpuemu_ci.config run while a config of `ops` ops loads."""
    path = BENCH.write_config(root, ops)  # the bench's configs: N ops, each with its dims, inputs and kwargs
    count = 0

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if not frame.f_code.co_filename.startswith(CONFIG_CODE):
            return None  # tomllib and the standard library: not ours to count
        if event == "line":
            count += 1
        return trace

    sys.settrace(trace)
    try:
        config = load_config(path, env={"GPUEMU_USER_CONFIG": "none"})
    finally:
        sys.settrace(None)
    assert len(config.ops) == ops
    return count


@pytest.mark.slow
def test_loading_is_linear_in_the_number_of_ops(tmp_path: Path) -> None:
    (tmp_path / "ops.py").write_text("def f(x, alpha=1.0):\n    return x * alpha\n")
    small, large = lines_run_loading(tmp_path, 100), lines_run_loading(tmp_path, 1000)
    assert large / small < 11, f"100 ops ran {small:,} lines, 1,000 ops {large:,}: more than linear"
