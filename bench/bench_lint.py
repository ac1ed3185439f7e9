"""Lint overhead and parallel speedup, measured side by side in one run.

For N kernel sources x the archs, it times, interleaved in each of --repeat rounds:
  bare      - `nvcc -cubin -Xptxas -v` for every kernel x arch, one after another
  lint -j1  - `lint_kernels(..., jobs=1)`: the same compiles + PTX, names, checks (+ SASS if a tool exists)
  lint -jN  - the same with N parallel compiles
and prints overhead = lint-j1 / bare and speedup = lint-j1 / lint-jN. Ratios use the fastest round of each
(the least disturbed by other load on the machine); medians are printed too.

    python bench/bench_lint.py --kernels 12 --archs sm_80,sm_90 --repeat 3
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuemu_ci.config.model import ArtifactChecks, KernelSpec, PatternCheck
from gpuemu_ci.lint import discover_toolchain, lint_kernels

SOURCES = ("gelu.cu", "matmul.cu", "spill.cu", "templ.cu", "noinline.cu", "printf.cu")
FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "ptx-lint" / "src"


def make_kernels(n: int, archs: tuple[str, ...], workdir: Path) -> list[KernelSpec]:
    """N distinct sources cycled from the fixtures (a define makes each file unique)."""
    specs = []
    for i in range(n):
        base = SOURCES[i % len(SOURCES)]
        src = workdir / f"k{i:03d}_{base}"
        src.write_text(f"#define GPUEMU_BENCH_VARIANT {i}\n" + (FIXTURES / base).read_text())
        checks = ArtifactChecks(max_registers=255, forbidden_patterns=(PatternCheck(r"^ld\.local", "ptx"),))
        specs.append(KernelSpec(f"k{i}", src, archs, artifact_checks=checks))
    return specs


def bare(specs: list[KernelSpec], nvcc: str, workdir: Path) -> float:
    start = time.perf_counter()
    for s in specs:
        for arch in s.archs:
            cmd = [
                nvcc,
                "-cubin",
                f"-arch={arch}",
                "-Xptxas",
                "-v",
                "-o",
                str(workdir / "bare.cubin"),
                str(s.source),
            ]
            subprocess.run(cmd, capture_output=True, check=True)
    return time.perf_counter() - start


def timed_lint(specs: list[KernelSpec], jobs: int, toolchain) -> float:
    start = time.perf_counter()
    report = lint_kernels(specs, jobs=jobs, toolchain=toolchain)
    elapsed = time.perf_counter() - start
    assert all(k.error is None for k in report.kernels), "a bench kernel failed to compile"
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kernels", type=int, default=12)
    parser.add_argument("--archs", default="sm_80,sm_90")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    archs = tuple(a for a in args.archs.split(",") if a)
    toolchain = discover_toolchain()
    if toolchain.nvcc is None:
        print("nvcc not found: nothing to measure", file=sys.stderr)
        return 3
    no_sass = dataclasses.replace(toolchain, nvdisasm=None, cuobjdump=None)
    variants = [("lint (no SASS)", no_sass)]
    if toolchain.sass_tool:
        variants.append((f"lint (+SASS via {toolchain.sass_tool})", toolchain))
    with tempfile.TemporaryDirectory(prefix="gpuemu-bench-") as tmp:
        workdir = Path(tmp)
        specs = make_kernels(args.kernels, archs, workdir)
        compiles = len(specs) * len(archs)
        print(
            f"{len(specs)} kernels x {len(archs)} archs = {compiles} compiles; "
            f"nvcc {toolchain.nvcc_version}; {os.cpu_count()} CPUs; --jobs {args.jobs}; {args.repeat} rounds"
        )
        bare_times, results = [], {name: ([], []) for name, _ in variants}
        for _ in range(args.repeat):
            bare_times.append(bare(specs, toolchain.nvcc, workdir))
            for name, tc in variants:
                results[name][0].append(timed_lint(specs, 1, tc))
                results[name][1].append(timed_lint(specs, args.jobs, tc))
        shutil.rmtree(workdir, ignore_errors=True)
    b = min(bare_times)
    print(
        f"bare nvcc, sequential      : min {b:6.2f} s  median {statistics.median(bare_times):6.2f} s  "
        f"({b / compiles * 1000:.0f} ms per compile)"
    )
    for name, (seq, par) in results.items():
        s, p = min(seq), min(par)
        print(
            f"{name:27s}: -j1 min {s:6.2f} s (median {statistics.median(seq):6.2f})   "
            f"-j{args.jobs} min {p:6.2f} s (median {statistics.median(par):6.2f})"
        )
        overhead, speedup = s / b, s / p
        print(f"    overhead over bare nvcc (j1/bare): {overhead:5.2f}x   speedup (j1/jN): {speedup:5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
