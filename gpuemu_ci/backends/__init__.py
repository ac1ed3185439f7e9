"""Running user code: persistent isolated workers, framework bridges, Triton on CPU, CUDA through CuPy.

The names are imported lazily, so that a worker process (`python -m gpuemu_ci.backends.worker`) does not pay
for the pool's imports when it starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuemu_ci.backends.gpu import GpuInfo, detect_gpu
    from gpuemu_ci.backends.pool import WorkerPool

__all__ = ["GpuInfo", "WorkerPool", "detect_gpu"]


def __getattr__(name: str) -> Any:
    if name == "WorkerPool":
        from gpuemu_ci.backends.pool import WorkerPool

        return WorkerPool
    if name in ("GpuInfo", "detect_gpu"):
        from gpuemu_ci.backends import gpu

        return getattr(gpu, name)
    raise AttributeError(f"module 'gpuemu_ci.backends' has no attribute {name!r}")
