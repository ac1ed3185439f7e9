"""Every way a library launches a Triton kernel works under the layer, through the real gate (worker processes,
Triton's interpreter): `triton.autotune` with several configs (Triton's own benchmarker has no device to time
on a CPU: the config is drawn from the case seed), `triton.heuristics`, `@triton.jit` helpers from another
module that imports Triton's builtins by name, a kernel module without a `__spec__` (exec'd source), and a
grid given as a callable. The kernels are modelled on Liger-Kernel's and FlagGems' (batched matmul with
autotuned tiles, fused elementwise with an even-size fast path). An exception of the layer's own code is the
tool's error (exit 3, "internal error in the Triton layer", the kernel and its line), never the op's failure.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.triton_cpu.support_interpreter import gpuemu

pytest.importorskip("torch")
pytest.importorskip("triton")

HELPERS = textwrap.dedent("""
    import triton
    from triton.language import exp  # a builtin imported by name, as some libraries do


    @triton.jit
    def sigmoid(x):
        return 1.0 / (1.0 + exp(-x))
""")

GENERATED = """
import triton
import triton.language as tl


@triton.jit
def _scale_generated(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask, other=0.0) * 3.0, mask=mask)
"""

KERNELS = textwrap.dedent("""
    import sys
    import types

    import torch
    import triton
    import triton.language as tl

    import helpers

    # ---- a batched matmul with autotuned tiles (FlagGems' bmm shape) ----------------------------------------
    @triton.autotune(
        configs=[
            triton.Config({"BM": 16, "BN": 16, "BK": 16}),
            triton.Config({"BM": 32, "BN": 16, "BK": 32}),
            triton.Config({"BM": 16, "BN": 32, "BK": 8}),
        ],
        key=["M", "N", "K"],
    )
    @triton.jit
    def _bmm(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        batch = tl.program_id(2)
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        a_ptr += batch * M * K
        b_ptr += batch * K * N
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            rk = k + tl.arange(0, BK)
            a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
            b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc += tl.dot(a, b, input_precision="ieee")
        c = c_ptr + batch * M * N + rm[:, None] * N + rn[None, :]
        tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


    def bmm(a, b):
        a, b = a.contiguous(), b.contiguous()
        B, M, K = a.shape
        N = b.shape[2]
        c = torch.empty((B, M, N), dtype=a.dtype)
        grid = lambda meta: (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]), B)  # noqa: E731
        _bmm[grid](a, b, c, M, N, K)
        return c


    # ---- heuristics: an even-size fast path (Liger's elementwise kernels) -------------------------------
    @triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
    @triton.jit
    def _silu(x_ptr, y_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        if EVEN:
            x = tl.load(x_ptr + offs).to(tl.float32)
            tl.store(y_ptr + offs, (x * helpers.sigmoid(x)).to(y_ptr.dtype.element_ty))
        else:
            x = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
            tl.store(y_ptr + offs, (x * helpers.sigmoid(x)).to(y_ptr.dtype.element_ty), mask=offs < n)


    def silu(x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        _silu[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n, BLOCK=64)
        return y


    # ---- a kernel from a module without a __spec__ (generated source) ---------------------------------------
    generated = types.ModuleType("generated_kernels")
    generated.__spec__ = None
    sys.modules["generated_kernels"] = generated
    exec(compile(GENERATED, "<generated kernels>", "exec"), generated.__dict__)


    def scale3(x):
        x = x.contiguous()
        y = torch.empty_like(x)
        generated._scale_generated[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
        return y


    def ref_bmm(a, b):
        return a @ b


    def ref_silu(x):
        return x / (1.0 + __import__("numpy").exp(-x))


    def ref_scale3(x):
        return 3.0 * x
""").replace("GENERATED", repr(GENERATED))

CONFIG = """
[project]
name = "launch-paths"
framework = "torch"
[ci]
quick_iterations = 4
[[ops]]
name = "bmm"
op = "kernels:bmm"
reference = "kernels:ref_bmm"
family = "matmul"
dtypes = ["float32", "bfloat16"]
output = ["B", "M", "N"]
[ops.dims]
B = [2]
M = { min = 1, max = 40, typical = [24] }
N = { min = 1, max = 40, typical = [20] }
K = { min = 1, max = 48, typical = [40] }
[ops.inputs]
a = ["B", "M", "K"]
b = ["B", "K", "N"]
[[ops]]
name = "silu"
op = "kernels:silu"
reference = "kernels:ref_silu"
family = "elementwise"
transcendental_ulps = 8
dtypes = ["float32", "bfloat16"]
[ops.dims]
N = { min = 1, max = 300, typical = [128] }
[ops.inputs]
x = ["N"]
[[ops]]
name = "scale3"
op = "kernels:scale3"
reference = "kernels:ref_scale3"
family = "elementwise"
dtypes = ["float32"]
[ops.dims]
N = { min = 1, max = 300, typical = [100] }
[ops.inputs]
x = ["N"]
"""

# A stand-in for a bug of the layer's own code: the workers' interpreter loads it at startup (before the layer
# records itself, so this is the layer as shipped, not an op tampering with it); the layer's fp32 dot then
# raises inside numerics.py.
BROKEN_LAYER = textwrap.dedent("""
    import os
    if os.environ.get("TRITON_INTERPRET") == "1":
        from gpuemu_ci.triton_cpu import numerics

        numerics.np = None
""")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("paths")
    (root / "kernels.py").write_text(KERNELS)
    (root / "helpers.py").write_text(HELPERS)
    (root / "gpuemu.toml").write_text(CONFIG)
    return root


@pytest.fixture(scope="module")
def ran(project: Path) -> tuple[dict, subprocess.CompletedProcess[str]]:
    done = gpuemu("run", "--seed", "5", "--out", "out", "--jobs", "2", "--no-lint", cwd=project)
    return json.loads((project / "out" / "results.json").read_text()), done


@pytest.mark.slow
def test_every_launch_path_runs_and_passes_with_bfloat16_judged(ran: tuple) -> None:
    results, done = ran
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ops = {op["name"]: op for op in results["ops"]}
    for name in ("bmm", "silu", "scale3"):
        op = ops[name]
        assert op["status"] == "passed" and op["cases_skipped"] == 0, op
        assert op["interpreter"] == "triton-interpreter"
    assert {row["dtype"] for row in ops["bmm"]["dtypes"]} == {"float32", "bfloat16"}
    assert ops["bmm"]["triton_dot_precisions"] == ["ieee"]


@pytest.mark.slow
def test_an_autotuned_case_replays_with_the_config_its_seed_drew(project: Path, ran: tuple) -> None:
    """The autotuner's choice is a function of the case seed, not of what the worker ran before: the same
    case replayed alone gives the same verdict and the same figures."""
    results, _ = ran
    bmm = next(op for op in results["ops"] if op["name"] == "bmm")
    row = bmm["dtypes"][0]
    replayed = gpuemu(
        "run", "--seed", "5", "--op", "bmm", "--out", "again", "--jobs", "1", "--no-lint", cwd=project
    )
    assert replayed.returncode == 0, replayed.stderr[-2000:]
    again = json.loads((project / "again" / "results.json").read_text())["ops"][0]["dtypes"][0]
    assert (again["worst_headroom"], again["max_abs_error"]) == (row["worst_headroom"], row["max_abs_error"])


@pytest.mark.slow
def test_an_exception_of_the_layer_is_the_tools_error_naming_kernel_and_line(project: Path) -> None:
    site = project / "broken"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BROKEN_LAYER)
    done = gpuemu(
        "run", "--op", "bmm", "--dtype", "float32", "--out", "broken-out", "--no-lint", cwd=project,
        first_on_path=site,
    )  # fmt: skip
    assert done.returncode == 3, done.stdout[-2000:] + done.stderr[-2000:]
    op = json.loads((project / "broken-out" / "results.json").read_text())["ops"][0]
    assert op["status"] == "error" and op["cases_failed"] == 0
    message = op["failures"][0]["message"]
    assert "internal error in the Triton layer" in message and "kernel `_bmm` at kernels.py:" in message
    assert "AttributeError" in message and "numerics.py" in message and "not judged" in message
