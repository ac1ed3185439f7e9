"""Running user code: persistent isolated workers, framework bridges, Triton on CPU, CUDA through CuPy."""

from gpuemu_ci.backends.gpu import GpuInfo, detect_gpu
from gpuemu_ci.backends.pool import WorkerPool

__all__ = ["GpuInfo", "WorkerPool", "detect_gpu"]
