"""GPU detection for the results document and for deciding how ops run (device vs Triton interpreter).

The parent never creates a CUDA context: it asks `nvidia-smi`, and, when CuPy is installed, a short-lived
subprocess for the CUDA runtime version. No GPU (or no driver) gives None, which results.json reports as
"none".
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import threading
from typing import Any

from gpuemu_ci.launch import run_command
from gpuemu_ci.results.model import GpuInfo

_SMI_FIELDS = "name,compute_cap,driver_version,memory.total"
_CUPY_PROBE = (
    "import json, cupy\n"
    "rt = cupy.cuda.runtime\n"
    "n = rt.getDeviceCount()\n"
    "p = rt.getDeviceProperties(0) if n else None\n"
    "print(json.dumps({'count': n, 'runtime': rt.runtimeGetVersion(), 'driver': rt.driverGetVersion(),\n"
    "  'name': p['name'].decode() if p else '', 'cc': f\"{p['major']}.{p['minor']}\" if p else '',\n"
    "  'mem': int(p['totalGlobalMem']) if p else 0, 'cupy': cupy.__version__}))\n"
)


def _cuda_version(code: int) -> str:
    """12040 -> "12.4" (CUDA's encoding: 1000 * major + 10 * minor)."""
    return f"{code // 1000}.{(code % 1000) // 10}"


def parse_nvidia_smi(text: str) -> GpuInfo | None:
    """Parse `nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader,
    nounits` output (one line per GPU); None when it lists no GPU."""
    rows = [[cell.strip() for cell in line.split(",")] for line in text.strip().splitlines() if line.strip()]
    rows = [r for r in rows if len(r) >= 4]
    if not rows:
        return None
    name, cc, driver, memory = rows[0][:4]
    try:
        memory_bytes: int | None = int(float(memory) * 1024 * 1024)  # MiB
    except ValueError:
        memory_bytes = None
    return GpuInfo(
        name=name,
        compute_capability=cc if cc and cc != "[N/A]" else "unknown",
        count=len(rows),
        memory_bytes=memory_bytes,
        driver_version=driver or None,
    )


class _Stopped(Exception):
    """A signal arrived while a probe ran: the run stops, and nothing is known about the GPU."""


def _run(cmd: list[str], timeout: float, stop: threading.Event | None) -> str | None:
    try:
        done = run_command(cmd, timeout, stop)
    except OSError:
        return None
    if done.stopped:
        raise _Stopped
    return done.stdout if done.returncode == 0 else None


def _probe_cupy(timeout: float, stop: threading.Event | None) -> dict[str, Any] | None:
    if importlib.util.find_spec("cupy") is None:
        return None
    out = _run([sys.executable, "-c", _CUPY_PROBE], timeout, stop)
    if not out:
        return None
    try:
        data = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return data if data.get("count") else None


_DETECTED: dict[float, GpuInfo | None] = {}  # what detect_gpu found, once per process (per timeout)


def detect_gpu(timeout_s: float = 60.0, stop: threading.Event | None = None) -> GpuInfo | None:
    """The GPU this machine has, or None. `GPUEMU_NO_GPU=1` forces None (e.g. to test the CPU paths). Once
    `stop` is set (a signal: the run stops) the probe under way is killed and None returned, not remembered."""
    if timeout_s not in _DETECTED:
        try:
            _DETECTED[timeout_s] = _detect(timeout_s, stop)
        except _Stopped:
            return None
    return _DETECTED[timeout_s]


def _detect(timeout_s: float, stop: threading.Event | None) -> GpuInfo | None:
    if os.environ.get("GPUEMU_NO_GPU") == "1":
        return None
    info: GpuInfo | None = None
    smi = shutil.which("nvidia-smi")
    if smi:
        out = _run([smi, f"--query-gpu={_SMI_FIELDS}", "--format=csv,noheader,nounits"], timeout_s, stop)
        info = parse_nvidia_smi(out) if out else None
        if info is None:  # no GPU behind the driver, or nvidia-smi failed
            return None
    cupy = _probe_cupy(timeout_s, stop)
    if cupy is None:
        return info
    if info is None:
        return GpuInfo(
            name=cupy["name"],
            compute_capability=cupy["cc"],
            count=int(cupy["count"]),
            memory_bytes=int(cupy["mem"]) or None,
            cuda_runtime_version=_cuda_version(int(cupy["runtime"])),
            cuda_driver_api_version=_cuda_version(int(cupy["driver"])),
            cupy_version=cupy["cupy"],
            source="cupy",
        )
    return GpuInfo(
        name=info.name,
        compute_capability=info.compute_capability if info.compute_capability != "unknown" else cupy["cc"],
        count=info.count,
        memory_bytes=info.memory_bytes,
        driver_version=info.driver_version,
        cuda_runtime_version=_cuda_version(int(cupy["runtime"])),
        cuda_driver_api_version=_cuda_version(int(cupy["driver"])),
        cupy_version=cupy["cupy"],
        source="nvidia-smi",
    )
