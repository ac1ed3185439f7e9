"""GPU detection: nvidia-smi parsing, the no-GPU answer, and what results.json records."""

from __future__ import annotations

import json
import shutil

import msgspec
import pytest

from gpuemu_ci.backends import gpu as gpu_module
from gpuemu_ci.backends.gpu import GpuInfo, detect_gpu, parse_nvidia_smi

SMI_TWO_H100 = """\
NVIDIA H100 80GB HBM3, 9.0, 550.54.15, 81559
NVIDIA H100 80GB HBM3, 9.0, 550.54.15, 81559
"""


def test_parse_nvidia_smi_query_output() -> None:
    info = parse_nvidia_smi(SMI_TWO_H100)
    assert info is not None
    assert (info.name, info.compute_capability, info.count) == ("NVIDIA H100 80GB HBM3", "9.0", 2)
    assert info.driver_version == "550.54.15"
    assert info.memory_bytes == 81559 * 1024 * 1024
    assert info.arch == "sm_90"


def test_parse_nvidia_smi_old_driver_and_empty_output() -> None:
    info = parse_nvidia_smi("Tesla T4, [N/A], 470.82.01, [N/A]\n")
    assert info is not None and info.compute_capability == "unknown" and info.memory_bytes is None
    assert parse_nvidia_smi("") is None
    assert parse_nvidia_smi("No devices were found\n") is None


def test_gpu_info_is_plain_json() -> None:
    info = GpuInfo("NVIDIA A100-SXM4-40GB", "8.0", 1, 42, "535.1", "12.2", "12.2", "13.0.0", "cupy")
    data = json.loads(msgspec.json.encode(info))
    assert isinstance(data, dict)
    assert json.loads(json.dumps(data)) == data
    assert info.arch == "sm_80" and data["cuda_runtime_version"] == "12.2"
    assert msgspec.json.decode(msgspec.json.encode(info), type=GpuInfo) == info


def test_detect_gpu_on_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    info = detect_gpu()
    if shutil.which("nvidia-smi") is None:
        try:
            import cupy  # noqa: F401
        except ImportError:
            assert info is None  # no driver tool, no CuPy: nothing to find
    if info is not None:
        assert info.name and info.count >= 1
    monkeypatch.setattr(gpu_module, "_DETECTED", {})  # detected once per process: ask again
    monkeypatch.setenv("GPUEMU_NO_GPU", "1")
    assert detect_gpu() is None
