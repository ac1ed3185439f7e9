"""NVRTC + ptxas against nvcc -Xptxas -v on the same sources, flags and archs (issue #15, item 3).

`measure(route)` lints a project of every kernel source gpuemu-ci's tests and benchmarks compile (the ptx-lint
fixtures, bench/bench_lint.py's sources with its variant define, device-only versions of the fixtures with host
code, and flag variants) with one front end:

- "nvcc-system": the machine's nvcc (CUDA 13.0 here);
- "nvcc-wheel": NVIDIA's nvcc wheel (the release of the NVRTC wheel), when installed with its cicc;
- "nvrtc": NVRTC and the ptxas of its own release, as in the Action's image.

Run as a script it prints the comparison table: `python -m tests.lint.support_frontends`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "ptx-lint" / "src"
ARCHS = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120")
METRICS = ("registers", "spill_stores", "spill_loads", "stack_frame", "shared_memory")

# Device-only copies of the fixtures that carry host code or host headers (NVRTC compiles device code only).
DEVICE_ONLY = {
    "printf_device": ("printf.cu", lambda text: text.replace("#include <cstdio>\n", "")),
    "noinline_device": ("noinline.cu", lambda text: text.replace("#include <cstdio>\n", "")),
    "internal_device": ("internal.cu", lambda text: "\n".join(text.splitlines()[:2]) + "\n"),
}
# (name, source, flags): flags NVRTC translates (lint/nvrtc.translate_flags).
FLAG_VARIANTS = (
    ("spill_maxrreg24", "spill.cu", ["-maxrregcount=24"]),
    ("gelu_fast_math", "gelu.cu", ["--use_fast_math"]),
    ("matmul_lineinfo", "matmul.cu", ["-lineinfo"]),
    ("templ_O3_std17", "templ.cu", ["-O3", "-std=c++17"]),
    ("spill_xptxas", "spill.cu", ["-Xptxas", "-maxrregcount=32"]),
)


def write_project(root: Path, archs: tuple[str, ...] = ARCHS) -> Path:
    """gpuemu.toml with every kernel for `archs`, in `root`; returns the config path."""
    root.mkdir(parents=True, exist_ok=True)
    blocks = ['[project]\nname = "frontends"\n']

    def kernel(name: str, source: str, flags: list[str] | None = None) -> None:
        arch_list = ", ".join(f'"{a}"' for a in archs)
        flag_text = f"\nflags = {json.dumps(flags)}" if flags else ""
        blocks.append(
            f'[[kernels]]\nname = "{name}"\nsource = "{source}"\narchs = [{arch_list}]{flag_text}\n'
        )

    for source in sorted(FIXTURES.glob("*.cu")):
        shutil.copy(source, root / source.name)
        kernel(source.stem, source.name)
    for name, (base, change) in DEVICE_ONLY.items():
        (root / f"{name}.cu").write_text(change((FIXTURES / base).read_text()))
        kernel(name, f"{name}.cu")
    for i, base in enumerate(("gelu.cu", "matmul.cu", "spill.cu", "templ.cu", "noinline.cu", "printf.cu")):
        name = f"bench_{i:02d}_{Path(base).stem}"  # bench/bench_lint.py's sources: a define makes each unique
        (root / f"{name}.cu").write_text(
            f"#define GPUEMU_BENCH_VARIANT {i}\n" + (FIXTURES / base).read_text()
        )
        kernel(name, f"{name}.cu")
    for name, base, flags in FLAG_VARIANTS:
        shutil.copy(FIXTURES / base, root / f"{name}.cu")
        kernel(name, f"{name}.cu", flags)
    config = root / "gpuemu.toml"
    config.write_text("\n".join(blocks))
    return config


def route_env(route: str) -> dict[str, str] | None:
    """The environment that makes `gpuemu-ci lint` use `route`; None when this machine lacks it."""
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    env["GPUEMU_USER_CONFIG"] = "none"
    if route == "nvcc-system":
        return env if shutil.which("nvcc") else None
    if route == "nvrtc":
        from gpuemu_ci.lint.nvrtc import find_nvrtc

        env["GPUEMU_LINT_FRONTEND"] = "nvrtc"
        return env if find_nvrtc(env) is not None else None  # no NVRTC of 13.1 or later here
    if route == "nvcc-wheel":  # no system CUDA on PATH: the wheel's nvcc is found in site-packages
        from gpuemu_ci.lint.nvrtc import wheel_roots

        env["PATH"] = "/usr/bin:/bin"
        wheel_nvcc = [p for root in wheel_roots() for p in root.glob("*/bin/nvcc")]
        return env if wheel_nvcc else None
    raise ValueError(route)


def measure(route: str, config: Path) -> dict[str, Any] | None:
    """{"toolchain": ..., "kernels": {name: {"status", "error", "entries": {(entry, arch): metrics}}}}."""
    env = route_env(route)
    if env is None:
        return None
    done = subprocess.run(
        [sys.executable, "-m", "gpuemu_ci", "lint", "--config", str(config), "--json"],
        capture_output=True, text=True, env=env, timeout=1800, check=False,
    )  # fmt: skip
    if not done.stdout.strip():
        raise AssertionError(f"{route}: no report\n{done.stderr[-3000:]}")
    report = json.loads(done.stdout)
    toolchain = report["lint"]["toolchain"] or {}
    if route == "nvcc-wheel" and toolchain.get("nvcc") in (None, _system_nvcc_version()):
        return None  # no usable nvcc wheel here
    if route == "nvrtc" and not toolchain.get("nvrtc"):
        return None
    kernels = {}
    for kernel in report["kernels"]:
        # Keyed by the demangled name: an anonymous namespace's mangled name embeds a per-compile hash.
        entries = {(e["kernel"], e["arch"]): {m: e[m] for m in METRICS} for e in kernel["entries"]}
        kernels[kernel["name"]] = {
            "status": kernel["status"],
            "error": (kernel.get("error") or {}).get("message"),
            "entries": entries,
        }
    return {"toolchain": toolchain, "kernels": kernels}


def _system_nvcc_version() -> str | None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return None
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
    return out.rsplit("V", 1)[-1].strip() if "V" in out else None


def cell(metrics: dict[str, int | None]) -> str:
    return "/".join("-" if metrics[m] is None else str(metrics[m]) for m in METRICS)


def table(results: dict[str, dict[str, Any] | None]) -> str:
    """Markdown: one row per kernel entry x arch, one column per route, and whether NVRTC equals each nvcc."""
    routes = [r for r, v in results.items() if v is not None]
    header = ["kernel", "entry", "arch", *routes, *(f"nvrtc = {r}" for r in routes if r != "nvrtc")]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    names = sorted({k for v in results.values() if v for k in v["kernels"]})
    for name in names:
        per_route = {r: results[r]["kernels"].get(name) for r in routes}  # type: ignore[index]
        keys = sorted(
            {key for k in per_route.values() if k for key in k["entries"]}, key=lambda k: (k[0], k[1])
        )
        if not keys:
            row = [name, "", "all"]
            row += [
                (k or {}).get("status", "?") + (": " + (k["error"] or "")[:60] if k and k["error"] else "")
                for k in per_route.values()
            ]
            lines.append("| " + " | ".join(row) + " |")
            continue
        for entry, arch in keys:
            cells = []
            for k in per_route.values():
                metrics = (k or {}).get("entries", {}).get((entry, arch))
                cells.append(cell(metrics) if metrics else f"({(k or {}).get('status', '?')})")
            nvrtc = per_route.get("nvrtc")
            equal = []
            for route in routes:
                if route == "nvrtc":
                    continue
                a = (nvrtc or {}).get("entries", {}).get((entry, arch))
                b = (per_route[route] or {}).get("entries", {}).get((entry, arch))
                equal.append("n/a" if a is None or b is None else ("yes" if a == b else "**no**"))
            lines.append("| " + " | ".join([name, entry, arch, *cells, *equal]) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        config = write_project(Path(tmp))
        measured = {route: measure(route, config) for route in ("nvcc-system", "nvcc-wheel", "nvrtc")}
        for route, value in measured.items():
            print(f"{route}: {value['toolchain'] if value else 'not on this machine'}")
        print(textwrap.dedent(f"cells: {'/'.join(METRICS)}"))
        print(table(measured))
