"""Config loading time against the number of ops, measured side by side in one run.

Writes gpuemu.toml files of N ops each (every op with its own dims, inputs and a kwarg list, as a large
project's registry looks) and times `load_config` on each, a few rounds interleaved, keeping the fastest round
(the least disturbed by other load on the machine). Loading must be linear in the number of ops: the ratio of
the time per op at the largest size to the time per op at the smallest stays near 1 (a quadratic step makes it
grow with the sizes' ratio: 10 at 10x the ops).

    python bench/bench_config_load.py --ops 10000,100000 --repeat 2
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from gpuemu_ci.config.load import load_config

HEADER = """\
[project]
name = "bench"

[validation]
dtypes = ["float32", "float16"]
seed = 1
"""

OP = """
[[ops]]
name = "op_{i}"
op = "ops:f"
reference = "ops:f"
family = "elementwise"
kwargs = {{ alpha = [0.5, 2.0] }}
[ops.dims]
N = [8, {n}]
[ops.inputs]
x = ["N"]
"""


def write_config(directory: Path, ops: int) -> Path:
    path = directory / f"gpuemu-{ops}.toml"
    path.write_text(HEADER + "".join(OP.format(i=i, n=16 + i % 100) for i in range(ops)), encoding="utf-8")
    return path


def timed_load(path: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one load."""
    start, start_cpu = time.perf_counter(), time.process_time()
    config = load_config(path, env={"GPUEMU_USER_CONFIG": "none"})
    elapsed, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    assert config.ops, "the bench config declares ops"
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--ops", default="10000,100000", help="comma-separated op counts (default %(default)s)"
    )
    parser.add_argument("--repeat", type=int, default=2, help="rounds; the fastest of each is kept")
    args = parser.parse_args()
    sizes = sorted(int(n) for n in args.ops.split(","))
    with tempfile.TemporaryDirectory(prefix="gpuemu-bench-config-") as tmp:
        (Path(tmp) / "ops.py").write_text("def f(x, alpha=1.0):\n    return x * alpha\n")
        paths = {n: write_config(Path(tmp), n) for n in sizes}
        best = dict.fromkeys(sizes, float("inf"))
        best_cpu = dict.fromkeys(sizes, float("inf"))
        for _ in range(max(1, args.repeat)):
            for n in sizes:
                wall, cpu = timed_load(paths[n])
                best[n], best_cpu[n] = min(best[n], wall), min(best_cpu[n], cpu)
    smallest = sizes[0]
    per_op_small = best_cpu[smallest] / smallest
    # CPU time is what the load costs; wall time adds whatever else the machine runs meanwhile.
    print(f"{'ops':>9} {'wall s':>8} {'CPU s':>8} {'CPU us/op':>10} {'per-op ratio (CPU)':>19}")
    for n in sizes:
        per_op = best_cpu[n] / n
        print(
            f"{n:>9,} {best[n]:>8.2f} {best_cpu[n]:>8.2f} {per_op * 1e6:>10.1f} {per_op / per_op_small:>19.2f}"
        )
    largest = sizes[-1]
    print(
        f"{largest:,} ops load in {best[largest]:.2f} s ({best_cpu[largest]:.2f} s of CPU); CPU time per op at "
        f"{largest:,} ops is {(best_cpu[largest] / largest) / per_op_small:.2f}x that at {smallest:,} "
        "(linear: about 1)"
    )


if __name__ == "__main__":
    main()
