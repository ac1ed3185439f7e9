"""How long `gpuemu-ci run` takes to stop after SIGINT, at every point of a run.

Runs a small project (one op that sleeps a little per call, so that the run lasts a few seconds) again and
again, sending SIGINT a little later each time: while the interpreter imports, while the zygote imports, as
the first case starts, in the middle of the suite, and as the first op call starts (found by a marker the op
writes). Prints, for each point, the time from the signal to the process's exit, and the worst of them.
A run must stop within 2 s at any point; on a machine shared with other work the times stretch with its
load, so the CPU time the process and its children used from the signal to the exit is printed beside it.

    python bench/bench_signal_stop.py --step 0.25 --jobs 1
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CONFIG = """
[project]
name = "signals"

[validation]
dtypes = ["float32"]
seed = 1

[ci]
quick_iterations = {iterations}

[[ops]]
name = "slow"
op = "ops:slow"
reference = "ops:ref"
family = "elementwise"
[ops.dims]
N = [64]
[ops.inputs]
x = ["N"]
"""

OPS = """
import os, time

def slow(x):
    marker = os.environ["FIRST_CALL"]
    if not os.path.exists(marker):
        open(marker, "w").close()
    time.sleep(0.05)
    return x.copy()

def ref(x):
    return x
"""


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cpu_so_far(pid: int) -> float:
    """CPU seconds process `pid` and the children it reaped have used (/proc/PID/stat: utime, stime, cutime,
    cstime)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def one_stop(root: Path, jobs: int, at: float | None) -> tuple[float, float, int, float]:
    """SIGINT `at` seconds after the start (None: when the op is first called): (seconds from the signal to the
    exit, when it was sent, exit code, CPU seconds the process tree used from the signal to its exit)."""
    marker = root / "first-call"
    marker.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO), "GPUEMU_USER_CONFIG": "none", "FIRST_CALL": str(marker)}
    command = [sys.executable, "-m", "gpuemu_ci", "run", "--config", str(root / "gpuemu.toml"), "--out",
               str(root / "out"), "--jobs", str(jobs), "--no-lint"]  # fmt: skip
    started = time.monotonic()
    gate = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if at is None:
        while not marker.exists() and gate.poll() is None:
            time.sleep(0.002)
    else:
        time.sleep(max(0.0, at - (time.monotonic() - started)))
    cpu_before = cpu_so_far(gate.pid)
    sent = time.monotonic()
    # Not Popen.send_signal, which reaps a process that has ended (and its usage with it).
    os.kill(gate.pid, signal.SIGINT)
    _, status, usage = os.wait4(gate.pid, 0)
    took = time.monotonic() - sent
    gate.returncode = os.waitstatus_to_exitcode(status)
    return took, sent - started, gate.returncode, usage.ru_utime + usage.ru_stime - cpu_before


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--step", type=float, default=0.25, help="seconds between the points (default %(default)s)"
    )
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--iterations", type=int, default=40, help="cases of the op: how long a run lasts")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuemu-bench-signal-") as tmp:
        root = Path(tmp)
        (root / "gpuemu.toml").write_text(CONFIG.format(iterations=args.iterations))
        (root / "ops.py").write_text(textwrap.dedent(OPS))
        cpu_before = children_cpu_s()
        begun = time.monotonic()
        finished = subprocess.run(
            [sys.executable, "-m", "gpuemu_ci", "run", "--config", str(root / "gpuemu.toml"), "--out",
             str(root / "out"), "--jobs", str(args.jobs), "--no-lint"],
            cwd=root, env={**os.environ, "PYTHONPATH": str(REPO), "GPUEMU_USER_CONFIG": "none",
                           "FIRST_CALL": str(root / "first-call")},
            capture_output=True, check=False,
        )  # fmt: skip
        whole = time.monotonic() - begun
        print(
            f"a whole run: {whole:.2f} s (exit {finished.returncode}, {children_cpu_s() - cpu_before:.2f} s CPU); "
            f"signals every {args.step:g} s until then, and at the first op call"
        )
        # From the first step: a signal before the interpreter has run gpuemu-ci's first line (its handlers are
        # installed before any import) kills it as it kills any Python program.
        points: list[float | None] = [None]
        at = args.step
        while at < whole:
            points.append(at)
            at += args.step
        print(f"{'sent at':>24} {'stopped in':>11} {'CPU after':>10} {'exit':>5}")
        worst = worst_cpu = 0.0
        for point in points:
            took, sent, code, cpu = one_stop(root, args.jobs, point)
            worst, worst_cpu = max(worst, took), max(worst_cpu, cpu)
            label = f"{sent:.2f} s" + (" (first op call)" if point is None else "")
            print(f"{label:>24} {took:>9.2f} s {cpu:>8.2f} s {code:>5}")
        print(
            f"worst time from SIGINT to exit: {worst:.2f} s ({worst_cpu:.2f} s of CPU at most) over {len(points)} "
            f"points; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
        )


if __name__ == "__main__":
    main()
