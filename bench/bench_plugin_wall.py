"""Wall time of `pytest --gpuemu` against `gpuemu-ci run` on the same config, with this checkout's plugin and
with an earlier revision's, side by side (issue #27: the plugin was about 5x slower than the CLI).

Three sides, each a subprocess whose PYTHONPATH is that side's tree, run in the config's directory:
  run     this checkout's `python -m gpuemu_ci run --config CONFIG --no-lint`
  before  the earlier revision's `python -m pytest --gpuemu` (extracted with `git archive`)
  after   this checkout's `python -m pytest --gpuemu`
Runs alternate (run, before, after, run, ...) so that all see the same load on a shared machine; the script
prints each run, the medians, and the ratios after/run and before/after.

    python bench/bench_plugin_wall.py --before main --runs 3 [--config examples/quickstart/gpuemu.toml]

Exit status: 0 when after/run is at most --target (2.0), 1 otherwise, 2 for a bad revision.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from bench_quick_wall import extract  # noqa: E402  (a sibling script, not a package)


def timed(command: list[str], code: Path, cwd: Path) -> float:
    env = dict(os.environ, PYTHONPATH=str(code), GPUEMU_USER_CONFIG="none")
    started = time.monotonic()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} with {code} exited {done.returncode}:\n{done.stdout[-2000:]}"
        )
    return wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--before", required=True, help="the earlier revision (a branch, tag or commit)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each side (default 3)")
    parser.add_argument("--config", type=Path, default=REPO / "examples" / "quickstart" / "gpuemu.toml")
    parser.add_argument("--target", type=float, default=2.0, help="the largest acceptable after/run ratio")
    args = parser.parse_args(argv)
    config = args.config.resolve()
    with tempfile.TemporaryDirectory(prefix="bench-plugin-") as scratch:
        before = Path(scratch) / "before"
        try:
            extract(args.before, before)
        except ValueError as exc:
            print(f"bench_plugin_wall: {exc}", file=sys.stderr)
            return 2
        pytest_command = [sys.executable, "-m", "pytest", "--gpuemu", "--gpuemu-config", str(config), "-q",
                          "-p", "no:cacheprovider", "--rootdir", str(config.parent)]  # fmt: skip
        run_command = [sys.executable, "-m", "gpuemu_ci", "run", "--config", str(config), "--no-lint",
                       "--out", str(Path(scratch) / "out")]  # fmt: skip
        sides = {
            "run": (REPO, run_command),
            "before": (before, pytest_command),
            "after": (REPO, pytest_command),
        }
        walls: dict[str, list[float]] = {name: [] for name in sides}
        for index in range(args.runs):
            for name, (code, command) in sides.items():
                wall = timed(command, code, config.parent)
                walls[name].append(wall)
                print(f"run {index + 1} {name:>6}: {wall:6.1f} s", flush=True)
    median = {name: statistics.median(values) for name, values in walls.items()}
    for name, value in median.items():
        print(f"median {name:>6}: {value:6.1f} s")
    ratio = median["after"] / median["run"]
    print(
        f"pytest --gpuemu / gpuemu-ci run: before {median['before'] / median['run']:.2f}x, after {ratio:.2f}x"
    )
    print(f"before / after: {median['before'] / median['after']:.2f}x")
    return 0 if ratio <= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
