"""Seconds inside op calls and inside reference calls for an example's planned cases, on the GPU (issue #31,
step 5 of bench/gpu_proof.py): the quick suite's cases as the gate plans and generates them, the op forward
and backward on CUDA tensors, the fp64 reference forward and backward once on the CPU and once on the device,
each timed between CUDA synchronisations. Imports torch, so it runs where gpu_proof.py's `bench` step runs:
on the device (and on the CPU in its unit test, `device="cpu"`).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gpuemu_ci.backends.loading import load_callable
from gpuemu_ci.config.load import load_config
from gpuemu_ci.fuzz.inputs import case_inputs
from gpuemu_ci.pipeline.session import Session
from gpuemu_ci.pipeline.settings import RunOptions, select_ops

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _timed(call: Callable[[], None], device: str) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    call()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started


def _forward_backward(fn: Any, inputs: Mapping[str, torch.Tensor], kwargs: Mapping[str, Any]) -> None:
    out = fn(**inputs, **kwargs)
    wanted = [t for t in inputs.values() if t.requires_grad]
    if wanted:
        torch.autograd.grad(out, wanted, torch.ones_like(out))


def _tensor(values: np.ndarray, device: str, dtype: torch.dtype) -> torch.Tensor:
    # bfloat16 arrays (ml_dtypes) have no torch.from_numpy: every 16-bit value is exact in float32
    return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).to(device, dtype)


def time_example(config_path: Path, device: str = "cuda") -> dict[str, Any]:
    config = load_config(config_path)
    op_s = ref_cpu_s = ref_device_s = 0.0
    cases = 0
    with tempfile.TemporaryDirectory() as scratch:
        session = Session(config, RunOptions(out_dir=Path(scratch)), gpu=None)  # plans only
        for op in select_ops(config, ()):
            run_op = load_callable(op.targets.op, config.root)
            reference = load_callable(op.targets.reference, config.root)
            refs = session.plan(op)
            for ref in refs:
                case = case_inputs(op, ref.seed, config.root, load_callable)
                dtype = DTYPES[case.dtype]
                kwargs = dict(case.kwargs)
                on_device = {n: _tensor(v, device, dtype).requires_grad_() for n, v in case.logical.items()}
                ref_cpu = {
                    n: torch.from_numpy(v.astype(np.float64)).requires_grad_()
                    for n, v in case.logical.items()
                }
                ref_dev = {n: t.detach().to(device).requires_grad_() for n, t in ref_cpu.items()}
                # Untimed warm-up: CUDA's lazy initialisation is not op time. Triton compiles once per BLOCK; the
                # gate run just before this loop (gpu_proof.py's bench step) left those compiles in Triton's cache.
                if ref is refs[0]:
                    _forward_backward(run_op, on_device, kwargs)
                    _forward_backward(reference, ref_dev, kwargs)
                op_s += _timed(lambda: _forward_backward(run_op, on_device, kwargs), device)  # noqa: B023
                ref_cpu_s += _timed(lambda: _forward_backward(reference, ref_cpu, kwargs), "cpu")  # noqa: B023
                ref_device_s += _timed(lambda: _forward_backward(reference, ref_dev, kwargs), device)  # noqa: B023
                cases += 1
    return {
        "cases": cases,
        "op_s": round(op_s, 4),
        "reference_cpu_s": round(ref_cpu_s, 4),
        "reference_device_s": round(ref_device_s, 4),
    }
