"""A project with a torch RMSNorm declared in gpuemu.toml, and a correct and a buggy implementation of it."""

from __future__ import annotations

import textwrap
from pathlib import Path

CONFIG = """
[project]
name = "shadowed"

[validation]
dtypes = ["float32"]

[ci]
corpus = "gpuemu-corpus"
quick_iterations = 8

[[ops]]
name = "rmsnorm"
op = "norms:rmsnorm"
reference = "norms:rmsnorm_ref"
family = "norm"
framework = "torch"
kwargs = { eps = [1e-6] }
[ops.dims]
M = [4, 16]
D = { min = 1, max = 256, typical = [64] }
[ops.inputs]
x = ["M", "D"]
weight = { dims = ["D"], kind = "affine_weight" }
"""

NORMS = """
import numpy as np
import torch

BUGGY = False  # set by the tests: activations are clamped to +-100 "against overflow" before squaring


def rmsnorm(x, weight, eps=1e-6):
    x32 = x.float()
    clamped = x32.clamp(-100.0, 100.0) if BUGGY else x32  # exact for ordinary activations, wrong for spikes
    squares = clamped * clamped
    return (x32 * torch.rsqrt(squares.mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def rmsnorm_ref(x, weight, eps=1e-6):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight
"""


def write_project(root: Path, *, buggy: bool) -> Path:
    (root / "gpuemu.toml").write_text(textwrap.dedent(CONFIG))
    (root / "norms.py").write_text(textwrap.dedent(NORMS).replace("BUGGY = False", f"BUGGY = {buggy}"))
    return root / "gpuemu.toml"
