"""For every key, alias, invariant and execution mode that gpuemu_ci/config/keys.py lists, two projects: one that
breaks what the key says (the run fails, or the config is refused with exit 2) and one that keeps it (the run
passes). tests/config/test_every_key.py runs them all; a key added to the table without its pair here fails
that test, so a key can never again be accepted and check nothing (issue 41).

A project is built from fragments: lines for the top-level tables, `[[ops]]` and `[[kernels]]` entries, files.
The pairs whose projects differ only in their ops or kernels are run together, each op or kernel judged on its
own verdict (one run for all the ops that must pass, one for all that must fail; the same for kernels); a pair
that changes [validation], [ci] or [policies] runs alone. Policies are judged by `gpuemu-ci diff` between two
runs of one project whose sources changed between them (the configs do not change the cases drawn).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum

# The code under test: numpy ops, references and hooks, each correct or wrong in one known way.
KEYOPS = """
import time

import numpy as np


def scale(x, factor=2.0):
    return (x.astype(np.float32) * np.float32(factor)).astype(x.dtype)


def scale_ref(x, factor=2.0):
    return x * factor


def ignores_factor(x, factor=2.0):  # a kwarg silently ignored
    return scale(x, 2.0)


def _off(x, factor, by):
    return (x.astype(np.float64) * factor + by).astype(x.dtype)


def off_1e_4(x, factor=2.0):
    return _off(x, factor, 1e-4)


def off_1e_3(x, factor=2.0):
    return _off(x, factor, 1e-3)


def off_5e_3(x, factor=2.0):
    return _off(x, factor, 5e-3)


def off_9e_3(x, factor=2.0):
    return _off(x, factor, 9e-3)


def off_1(x, factor=2.0):
    return _off(x, factor, 1.0)


def ulps_40(x, factor=2.0):  # a relative error of 40 unit roundoffs
    return (x.astype(np.float64) * factor * (1 + 40 * 2.0**-24)).astype(x.dtype)


def nan_first(x, factor=2.0):
    y = scale(x, factor)
    y[..., 0] = np.nan
    return y


def sqrt_op(x, factor=2.0):
    with np.errstate(invalid="ignore"):
        return np.sqrt(x.astype(np.float32)).astype(x.dtype)


def sqrt_ref(x, factor=2.0):
    with np.errstate(invalid="ignore"):
        return np.sqrt(x)


def inf_op(x, factor=2.0):
    return np.full_like(x, np.inf)


def inf_ref(x, factor=2.0):
    return np.full(x.shape, np.inf)


def square(x, factor=2.0):
    return (x.astype(np.float32) ** 2).astype(x.dtype)


def square_ref(x, factor=2.0):
    return x.astype(np.float64) ** 2


def symmetrise(x, factor=2.0):
    return (x + x.T).astype(x.dtype)


def symmetrise_ref(x, factor=2.0):
    return x + x.T


def identity(x, factor=2.0):
    return x.copy()


def identity_ref(x, factor=2.0):
    return x.astype(np.float64)


def softmax_ref(x, factor=2.0):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def softmax(x, factor=2.0):
    return softmax_ref(x.astype(np.float64)).astype(x.dtype)


def assumes_contiguous(x, factor=2.0):  # reads the buffer in memory order, whatever the strides say
    flat = np.lib.stride_tricks.as_strided(x, shape=(x.size,), strides=(x.itemsize,))
    return scale(flat.reshape(x.shape).copy(), factor)


def drops_last(x, factor=2.0):
    return scale(x, factor)[..., :-1]


def clips_large(x, factor=2.0):  # wrong only on values beyond 1e6 (the boundary distribution's large ones)
    return scale(np.clip(x, -1e6, 1e6), factor)


def tail_bug(x, factor=2.0):  # drops the last element when the length is not a multiple of 8
    y = scale(x, factor)
    if x.shape[-1] % 8:
        y[..., -1] = 0
    return y


def drops_nan(x, factor=2.0):  # does not propagate NaN
    return np.nan_to_num(scale(x, factor))


_calls = [0]


def flaky(x, factor=2.0):  # every second call differs in the last bit
    _calls[0] += 1
    y = scale(x, factor)
    return np.nextafter(y, np.inf).astype(x.dtype) if _calls[0] % 2 == 0 else y


def writes_half(x, factor=2.0, out=None):
    half = x.shape[-1] // 2
    out[..., :half] = scale(x, factor)[..., :half]
    return out


def writes_all(x, factor=2.0, out=None):
    out[...] = scale(x, factor)
    return out


def slow(x, factor=2.0):
    time.sleep(4)
    return scale(x, factor)


def slow_a_little(x, factor=2.0):
    time.sleep(0.6)
    return scale(x, factor)


def flushes(x, factor=2.0):  # flushes subnormal results to zero
    y = scale(x, factor)
    y[np.abs(y) < np.finfo(y.dtype).tiny] = 0
    return y


def to_float16(x, factor=2.0):
    return scale(x, factor).astype(np.float16)


def unit_scale(inputs, reference, dims, kwargs):
    return np.abs(reference) + 1.0, 1


def scale_vjp(x, grad_output, factor=2.0):
    return grad_output * factor


def scale_vjp_wrong(x, grad_output, factor=2.0):
    return grad_output * factor * 3


def make_inputs(rng, dims, dtype, kwargs, generate):
    return {"x": generate((dims["N"],), dtype)}


def make_inputs_wrong(rng, dims, dtype, kwargs, generate):
    return {"x": generate((dims["N"] + 1,), dtype)}


def gather(table, ids):
    return table[ids]


def gather_ref(table, ids):
    return np.take(table, ids, axis=0, mode="clip")


def gather_ignoring(table, ids):
    out = np.zeros((ids.shape[0], table.shape[1]), table.dtype)
    keep = ids != -100
    out[keep] = table[ids[keep]]
    return out


def gather_ignoring_ref(table, ids):
    out = np.zeros((ids.shape[0], table.shape[1]))
    keep = ids != -100
    out[keep] = table[ids[keep]]
    return out


def matmul(a, b):
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(a.dtype)


def matmul_ref(a, b):
    return a @ b


def sum16(x):  # sums each row one element at a time in float16
    acc = np.zeros(x.shape[:-1], np.float16)
    for j in range(x.shape[-1]):
        acc = (acc + x[..., j]).astype(np.float16)
    return acc


def sum_ref(x):
    return x.sum(axis=-1)


def truncates_to_bf16(x, factor=2.0):  # rounds toward zero on the store: a bias no tolerance sees
    y = np.ascontiguousarray(x.astype(np.float32) * np.float32(factor))
    return (y.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32).astype(x.dtype)


def tscale(x, factor=2.0):
    return x * factor


def tscale_wrong_grad(x, factor=2.0):
    import torch

    class Wrong(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t * factor

        @staticmethod
        def backward(ctx, grad):
            return grad * factor * 3

    return Wrong.apply(x)
"""

# A script-based op (`execution_mode = "script_based"`): `run(inputs, **kwargs)`.
SCRIPT_GOOD = """
import numpy as np

def run(inputs, factor=2.0):
    x = inputs["x"]
    return (x.astype(np.float32) * np.float32(factor)).astype(x.dtype)
"""
# A reference script as upstream writes one for script_based and daemon_orchestrated: run as a subprocess over
# upstream's JSON protocol, `reference(inputs, **kwargs)` called with the inputs dict.
REFERENCE_SCRIPT = """
def reference(inputs, factor=2.0):
    return inputs["x"] * factor
"""
SCRIPT_WRONG = """
import numpy as np

def run(inputs, factor=2.0):
    x = inputs["x"]
    return (x.astype(np.float32) * np.float32(factor) + 1).astype(x.dtype)
"""

# Kernels: a small one, and sources that spill, use a stack frame and shared memory.
KERNEL = """
#include "scale.h"
#ifdef BREAK
#error "built with BREAK"
#endif
extern "C" __global__ void scale_kernel(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = FACTOR * x[i];
}
"""
KERNEL_HEADER = "#define FACTOR 2.0f\n"
BROKEN_KERNEL = 'extern "C" __global__ void broken(float* x) { x[0] = undeclared; }\n'
SPILLING_KERNEL = """
extern "C" __global__ void spills(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float a[48];
#pragma unroll
    for (int j = 0; j < 48; ++j) a[j] = x[(i + j * 97) % n];
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < 48; ++j)
#pragma unroll
        for (int k = j; k < 48; ++k) s += a[j] * a[k];
    out[i] = s;
}
"""
STACK_KERNEL = """
extern "C" __global__ void stack(const int* idx, float* out, int n) {
    float table[64];
    for (int j = 0; j < 64; ++j) table[j] = j * 0.5f;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = table[idx[i] & 63];
}
"""
SHARED_KERNEL = """
extern "C" __global__ void shared(const float* x, float* out, int n) {
    __shared__ float tile[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    if (i < n) out[i] = tile[255 - threadIdx.x];
}
"""

# A rotary embedding computing its angles in float32 from integer positions (`[ops.intermediates]`).
KEYOPS += """

def rope(x, position_offset=0):
    t, d = x.shape
    inv_freq = np.float32(1.0) / np.power(np.float32(10000.0), np.arange(0, d, 2, dtype=np.float32) / np.float32(d))
    angles = (np.arange(t) + position_offset).astype(np.float32)[:, None] * inv_freq[None, :]
    c, s, xf, half = np.cos(angles), np.sin(angles), x.astype(np.float32), d // 2
    out = xf.copy()
    out[:, :half] = xf[:, :half] * c - xf[:, half:] * s
    out[:, half:] = xf[:, half:] * c + xf[:, :half] * s
    return out.astype(x.dtype)


def rope_ref(x, position_offset=0):
    t, d = x.shape
    inv_freq = 1.0 / np.power(10000.0, np.arange(0, d, 2) / d)
    angles = (np.arange(t) + position_offset)[:, None] * inv_freq[None, :]
    c, s, half = np.cos(angles), np.sin(angles), d // 2
    out = x.astype(np.float64)
    out[:, :half] = x[:, :half] * c - x[:, half:] * s
    out[:, half:] = x[:, half:] * c + x[:, :half] * s
    return out
"""
ROPE = {
    "op": '"keyops:rope"',
    "reference": '"keyops:rope_ref"',
    "kwargs": "{ position_offset = 4096 }",
    "constraints": '["D % 2 == 0"]',
    "sub_dims": "T = [64]\nD = [16]",
    "sub_inputs": 'x = ["T", "D"]',
}


def _angle(**keys: str) -> str:
    entry = {"effect": '"rotation"', "max": '"T + position_offset"', **keys}
    return "{ angle = { " + ", ".join(f"{k} = {v}" for k, v in entry.items()) + " } }"


FILES: dict[str, str] = {
    "keyops.py": KEYOPS,
    "script_good.py": SCRIPT_GOOD,
    "ref_script.py": REFERENCE_SCRIPT,
    "script_wrong.py": SCRIPT_WRONG,
    "k/scale.cu": KERNEL,
    "k/inc/scale.h": KERNEL_HEADER,
    "k/broken.cu": BROKEN_KERNEL,
    "k/spills.cu": SPILLING_KERNEL,
    "k/stack.cu": STACK_KERNEL,
    "k/shared.cu": SHARED_KERNEL,
}

BASE_SECTIONS: dict[str, dict[str, str]] = {
    "project": {"name": '"keys"'},
    "validation": {"dtypes": '["float32"]', "seed": "7"},
    "ci": {"quick_iterations": "2", "quick_extra_dtype_iterations": "1", "case_timeout": "60"},
}


class Outcome(Enum):
    PASSES = "passes"  # exit 0; the op or kernel passed (a GPU-only op: skipped where there is no GPU)
    FAILS = "fails"  # the op or kernel failed (exit 1), saying why
    REFUSED = "refused"  # exit 2 before anything runs, naming the problem
    INCOMPLETE = "incomplete"  # exit 3: something did not run (cut short, skipped), never a pass
    WARNS = "warns"  # exit 0 with a warning naming the key
    SKIPPED = "skipped"  # the op did not run here and says so (a GPU-only op on a machine without one)


REFUSED = Outcome.REFUSED


@dataclass(frozen=True)
class Project:
    """Fragments of a project: `sections` maps a table ("ci", "validation.tolerances") to key = value text."""

    sections: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    ops: tuple[str, ...] = ()  # each an [[ops]] entry without its header line
    kernels: tuple[str, ...] = ()
    args: tuple[str, ...] = ()  # extra `gpuemu-ci run` arguments
    env: Mapping[str, str] = field(default_factory=dict)
    needs: tuple[str, ...] = ()  # "torch", "nvcc" (a CUDA toolchain), "no-gpu"


@dataclass(frozen=True)
class Case:
    project: Project
    outcome: Outcome
    says: str = ""  # what the output must say (the key, the rule, the reason)
    target: str | None = None  # the op or kernel whose verdict is judged; None: the run's

    @property
    def batchable(self) -> bool:
        """An op or kernel entry judged on its own row, that needs no table, argument or variable of its own:
        it runs in the shared project of its side."""
        p = self.project
        return self.target is not None and not (p.sections or p.args or p.env) and self.outcome is not REFUSED


@dataclass(frozen=True)
class Pair:
    breaks: Case
    keeps: Case


def op(
    name: str,
    given: Mapping[str, str] | None = None,
    *,
    sub: Mapping[str, str] | None = None,
    drop: tuple[str, ...] = (),
    **keys: str,
) -> str:
    """An [[ops]] entry: the scale op over x[N] unless `given` and `keys` (TOML value text) or `sub` (the bodies
    of sub-tables) say otherwise; `drop` leaves default keys out."""
    fields = {
        "name": f'"{name}"',
        "op": '"keyops:scale"',
        "reference": '"keyops:scale_ref"',
        "family": '"elementwise"',
        "distributions": '["regular"]',
    }
    fields.update(given or {})
    fields.update(keys)
    for key in drop:
        fields.pop(key, None)
    tables = {"dims": "N = [8, 16]", "inputs": 'x = ["N"]'}
    tables.update(sub or {})
    lines = [f"{k} = {v}" for k, v in fields.items()]
    for table, body in tables.items():
        if body:
            lines += [f"[ops.{table}]", textwrap.dedent(body).strip()]
    return "\n".join(lines)


def kernel(name: str, source: str = "k/scale.cu", checks: str = "", **keys: str) -> str:
    """A [[kernels]] entry (lint only) with `checks` as its [kernels.artifact_checks]."""
    fields = {"name": f'"{name}"', "source": f'"{source}"', "archs": '["sm_80"]', "include_dirs": '["k/inc"]'}
    fields.update(keys)
    lines = [f"{k} = {v}" for k, v in fields.items()]
    if checks:
        lines += ["[kernels.artifact_checks]", textwrap.dedent(checks).strip()]
    return "\n".join(lines)


def gpu_op(name: str, **keys: str) -> str:
    return op(name, {**keys, "require_gpu": "true"})


LAUNCH = """
[kernels.dims]
N = [256]
[kernels.inputs]
x = ["N"]
[kernels.launch]
{launch}
"""
LAUNCH_KEYS = {
    "kernel": '"scale_kernel"',
    "grid": '["ceil(N / 128)"]',
    "block": "[128]",
    "args": '["x", "out", "N"]',
    "output": '["N"]',
    "output_dtype": '"float32"',
    "shared_mem": '"0"',
}


def launch_kernel(name: str, **launch: str) -> str:
    """A [[kernels]] entry launched through CuPy on a GPU (skipped without one)."""
    keys = {**LAUNCH_KEYS, **launch}
    body = "\n".join(f"{k} = {v}" for k, v in keys.items())
    entry = kernel(name, reference='"keyops:scale_ref"', family='"elementwise"')
    return entry + LAUNCH.format(launch=body)


def _ops(name: str, text: str, outcome: Outcome, says: str = "", needs: tuple[str, ...] = ()) -> Case:
    return Case(Project(ops=(text,), needs=needs), outcome, says, name)


def _kernels(name: str, text: str, outcome: Outcome, says: str = "") -> Case:
    return Case(Project(kernels=(text,), needs=("nvcc",)), outcome, says, name)


def _refused(
    says: str, *, ops: tuple[str, ...] = (), kernels: tuple[str, ...] = (), **sections: dict[str, str]
) -> Case:
    needs = ("nvcc",) if kernels else ()
    return Case(
        Project(sections=sections, ops=ops or (op("base"),), kernels=kernels, needs=needs),
        Outcome.REFUSED,
        says,
    )


def _run(
    outcome: Outcome,
    says: str = "",
    *,
    ops: tuple[str, ...] = (),
    kernels: tuple[str, ...] = (),
    args: tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
    needs: tuple[str, ...] = (),
    tables: Mapping[str, Mapping[str, str]] | None = None,
    **sections: dict[str, str],
) -> Case:
    """A case that runs a project of its own, judged on the run's verdict (`tables`: sections whose names
    are no Python identifier, "validation.tolerances")."""
    project = Project({**sections, **(tables or {})}, ops or (op("base"),), kernels, args, env or {}, needs)
    return Case(project, outcome, says)


P, F, R, W = Outcome.PASSES, Outcome.FAILS, Outcome.REFUSED, Outcome.WARNS


def _setting(table: str, key: str, bad: str, good: str, says: str | None = None) -> Pair:
    """A key of a top-level table whose wrong value is refused (naming it) and whose right value passes."""
    base = (op("base"),)
    return Pair(
        Case(Project({table: {key: bad}}, base), R, says or key), Case(Project({table: {key: good}}, base), P)
    )


def _non_negative(key: str, spelling: Mapping[str, str]) -> Pair:
    """`invariants` (either spelling) with non_negative: negative outputs fail, squares pass."""
    square = {"op": '"keyops:square"', "reference": '"keyops:square_ref"'}
    return _op_pair(key, {"op": '"keyops:scale"'}, square, "invariant `non_negative` violated", spelling)


def _nonfinite_rule(key: str, what: str, ops: str) -> Pair:
    """check_nan / check_inf = true fail an op whose output is NaN (infinite) even where the reference is too."""
    both = op(f"{key}_both", op=f'"keyops:{ops}_op"', reference=f'"keyops:{ops}_ref"')
    return Pair(
        _run(F, f"{key} = true fails any {what}", validation={key: "true"}, ops=(both,)),
        _run(P, validation={key: "true"}),
    )


def _op_pair(
    key: str,
    breaks: Mapping[str, str],
    keeps: Mapping[str, str],
    says: str,
    common: Mapping[str, str] | None = None,
    *,
    drop: tuple[str, ...] = (),
    **more: str,
) -> Pair:
    """Both halves are ops of the shared project, differing in `breaks` / `keeps` keys (TOML value text; a key
    `sub_<table>` is the body of [ops.<table>])."""
    sub_b = {k[4:]: v for k, v in breaks.items() if k.startswith("sub_")}
    sub_k = {k[4:]: v for k, v in keeps.items() if k.startswith("sub_")}
    keys_b = {k: v for k, v in breaks.items() if not k.startswith("sub_")}
    keys_k = {k: v for k, v in keeps.items() if not k.startswith("sub_")}
    name = _name(key)
    shared = {**(common or {}), **more}
    sub_c = {k[4:]: v for k, v in shared.items() if k.startswith("sub_")}
    keys_c = {k: v for k, v in shared.items() if not k.startswith("sub_")}
    b = op(f"{name}__breaks", {**keys_c, **keys_b}, sub={**sub_c, **sub_b}, drop=drop)
    k = op(f"{name}__keeps", {**keys_c, **keys_k}, sub={**sub_c, **sub_k}, drop=drop)
    return Pair(_ops(f"{name}__breaks", b, F, says), _ops(f"{name}__keeps", k, P))


def _name(key: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in key).strip("_")


# Kernel checks: a limit under the kernel's figure fails it, naming the limit; a limit above it passes.
def _check_pair(key: str, source: str, breaks: str, keeps: str, says: str, **keys: str) -> Pair:
    name = _name(key)
    return Pair(
        _kernels(f"{name}__breaks", kernel(f"{name}__breaks", source, breaks, **keys), F, says),
        _kernels(f"{name}__keeps", kernel(f"{name}__keeps", source, keeps, **keys), P),
    )


def _limit(key: str, check: str, source: str, says: str, **keys: str) -> Pair:
    return _check_pair(key, source, f"{check} = 0", f"{check} = 1000000", says, **keys)


SPILL_FLAGS = '["-maxrregcount=16"]'


def _launch_pair(key: str, bad: str, says: str) -> Pair:
    name = _name(key)
    refused = Case(
        Project(kernels=(launch_kernel(name, **{key.rsplit(".", 1)[1]: bad}),), needs=("nvcc",)), R, says
    )
    keeps = Case(
        Project(kernels=(launch_kernel(f"{name}__keeps"),), needs=("nvcc",)), P, target=f"{name}__keeps"
    )
    return Pair(refused, keeps)


def _invariant(name: str, breaks: Mapping[str, str], keeps: Mapping[str, str]) -> Pair:
    return _op_pair(
        f"invariant.{name}",
        {"invariants": f'["{name}"]', **breaks},
        {"invariants": f'["{name}"]', **keeps},
        f"invariant `{name}` violated",
    )


MATRIX = {"sub_dims": "N = [8]", "sub_inputs": 'x = ["N", "N"]'}
SQUARE_IN = {"sub_dims": "M = [4]\nN = [8]", "sub_inputs": 'x = ["M", "N"]'}

PAIRS: dict[str, Pair] = {
    # [project]
    "project.name": _setting("project", "name", "3", '"named"', "project.name"),
    "project.version": _setting("project", "version", "1", '"1.2.0"', "project.version"),
    "project.framework": _setting("project", "framework", '"fortran"', '"numpy"', "project.framework"),
    # [validation]
    "validation.dtypes": Pair(
        _refused("float33", validation={"dtypes": '["float33"]'}),
        _run(P, validation={"dtypes": '["float32", "float16"]'}),
    ),
    "validation.seed": _setting("validation", "seed", "-1", "3", "validation.seed"),
    "validation.check_nan": _nonfinite_rule("check_nan", "NaN", "sqrt"),
    "validation.check_inf": _nonfinite_rule("check_inf", "infinite", "inf"),
    "validation.bias_z_threshold": Pair(
        _run(
            F,
            "rounding bias",
            validation={"bias_z_threshold": "6.0"},
            ops=(
                op(
                    "bias",
                    op='"keyops:truncates_to_bf16"',
                    dtypes='["bfloat16"]',
                    kwargs="{ factor = [1.7] }",
                    sub={"dims": "N = [1024]"},
                ),
            ),
        ),
        _run(
            P,
            validation={"bias_z_threshold": "1e9"},
            ops=(
                op(
                    "bias",
                    op='"keyops:truncates_to_bf16"',
                    dtypes='["bfloat16"]',
                    kwargs="{ factor = [1.7] }",
                    sub={"dims": "N = [1024]"},
                ),
            ),
        ),
    ),
    "validation.tolerances.<dtype>": Pair(
        _run(
            F,
            "allclose allowance",
            ops=(op("tol", op='"keyops:off_1e_3"', drop=("family",)),),
            tables={"validation.tolerances": {"float32": "1e-6"}},
        ),
        _run(
            P,
            ops=(op("tol", op='"keyops:off_1e_3"', drop=("family",)),),
            tables={"validation.tolerances": {"float32": "{ atol = 1e-2, rtol = 0.0 }"}},
        ),
    ),
    # [ci]
    "ci.quick_dtypes": _setting("ci", "quick_dtypes", '["float33"]', '["float32"]', "float33"),
    "ci.quick_iterations": _setting("ci", "quick_iterations", "0", "3"),
    "ci.quick_extra_dtype_iterations": Pair(
        _refused("quick_extra_dtype_iterations", ci={"quick_extra_dtype_iterations": "0"}),
        _run(P, ci={"quick_extra_dtype_iterations": "2"}, validation={"dtypes": '["float32", "float16"]'}),
    ),
    "ci.thorough_iterations": _setting("ci", "thorough_iterations", "0", "2"),
    "ci.max_elements": _setting("ci", "max_elements", "0", "4096"),
    "ci.thorough_timeout": Pair(
        _run(
            Outcome.INCOMPLETE,
            "cut short",
            ci={"thorough_timeout": "1", "parallel_jobs": "1"},
            ops=(op("slow", op='"keyops:slow_a_little"'),),
            args=("--iterations", "8"),
        ),
        _run(P, ci={"thorough_timeout": "3600"}),
    ),
    "ci.case_timeout": Pair(
        _run(F, "timeout", ci={"case_timeout": "1"}, ops=(op("slow", op='"keyops:slow"'),)),
        _run(P, ci={"case_timeout": "30"}),
    ),
    "ci.parallel_jobs": _setting("ci", "parallel_jobs", "0", "2"),
    "ci.lint": Pair(
        _refused("ci.lint", ci={"lint": '"yes"'}),
        _run(P, ci={"lint": "true"}, kernels=(kernel("linted"),), needs=("nvcc",)),
    ),
    "ci.require_gpu": Pair(
        _run(
            Outcome.INCOMPLETE,
            "requires a GPU",
            ci={"require_gpu": "true"},
            ops=(gpu_op("gpu"), op("base")),
            needs=("no-gpu",),
        ),
        _run(P, ci={"require_gpu": "false"}),
    ),
    "ci.allow_skips": Pair(
        _run(
            Outcome.INCOMPLETE,
            "never count as passed",
            ci={"allow_skips": "false"},
            ops=(gpu_op("gpu"), op("base")),
            needs=("no-gpu",),
        ),
        _run(
            P,
            "with 1 skipped",
            ci={"allow_skips": "true"},
            ops=(gpu_op("gpu"), op("base")),
            needs=("no-gpu",),
        ),
    ),
    "ci.allow_unchecked": Pair(
        _run(
            F,
            "NOT CHECKED",
            ci={"allow_unchecked": "false"},
            env={"GPUEMU_SASS_TOOL": "none"},
            kernels=(kernel("sass", checks='forbidden_instructions = ["LDG.E.SYS"]'),),
            needs=("nvcc",),
        ),
        _run(
            W,
            "allowed: ci.allow_unchecked",
            ci={"allow_unchecked": "true"},
            env={"GPUEMU_SASS_TOOL": "none"},
            kernels=(kernel("sass", checks='forbidden_instructions = ["LDG.E.SYS"]'),),
            needs=("nvcc",),
        ),
    ),
    "ci.corpus": _setting("ci", "corpus", '"../outside"', '"gpuemu-corpus"'),
}

# [policies]: judged by `gpuemu-ci diff` between a run before and a run after the sources changed (the "grows"
# op's error grew tenfold, each kernel grew in one figure); every policy but the one under test is lenient.
GROWTH_BEFORE = "from keyops import off_1e_4 as op\n"
GROWTH_AFTER = "from keyops import off_1e_3 as op\n"
LIGHT = """
extern "C" __global__ void k(const float* x, float* out, int n) {
    int i = threadIdx.x;
    if (i < n) out[i] = x[i];
}
"""
HEAVY = {
    "regs": SPILLING_KERNEL.replace("spills(", "k("),
    "spill": SPILLING_KERNEL.replace("spills(", "k("),
    "stack": STACK_KERNEL.replace("stack(const int* idx", "k(const float* x").replace(
        "idx[i] & 63", "(int)x[i] & 63"
    ),
    "smem": SHARED_KERNEL.replace("shared(", "k("),
}
POLICY_OPS = (op("grows", op='"growth:op"', drop=("family",), sub={"tolerances": "float32 = 1e-2"}),)
POLICY_KERNELS = (
    kernel("regs", "k/regs.cu"),
    kernel("spill", "k/spill.cu", flags=SPILL_FLAGS),
    kernel("stack", "k/stack_v.cu"),
    kernel("smem", "k/smem.cu"),
)
POLICY_FILES_BEFORE = {
    "growth.py": GROWTH_BEFORE,
    **{f"k/{n}.cu": LIGHT for n in ("regs", "spill", "stack_v", "smem")},
}
POLICY_FILES_AFTER = {
    "growth.py": GROWTH_AFTER,
    "k/regs.cu": HEAVY["regs"],
    "k/spill.cu": HEAVY["spill"],
    "k/stack_v.cu": HEAVY["stack"],
    "k/smem.cu": HEAVY["smem"],
}
LENIENT = {
    "fail_on_regression": "true",
    "headroom_growth_threshold": "1000.0",
    "max_register_increase": "1000",
    "max_spill_increase": "1000000",
    "max_local_memory_increase": "1000000",
    "max_shared_memory_increase": "1000000",
    "max_instruction_increase_pct": "1000000.0",
}


def _diff(
    outcome: Outcome,
    says: str = "",
    *,
    policies: Mapping[str, str] | None = None,
    extra: Mapping[str, Mapping[str, str]] | None = None,
    **more: str,
) -> Case:
    sections = {"policies": {**LENIENT, **(policies or {}), **more}, **(extra or {})}
    return Case(Project(sections, POLICY_OPS, POLICY_KERNELS, ("--diff",), needs=("nvcc",)), outcome, says)


def _policy(key: str, says: str) -> Pair:
    return Pair(_diff(F, says, policies={key: "0"}), _diff(P, policies={key: LENIENT[key]}))


PAIRS.update(
    {
        "policies.fail_on_regression": Pair(
            _diff(F, "regression", fail_on_regression="true", max_register_increase="0"),
            _diff(
                W,
                "not failing the gate: fail_on_regression is off",
                fail_on_regression="false",
                max_register_increase="0",
            ),
        ),
        "policies.warn_threshold": Pair(
            _run(
                W,
                "uses 90.0% of its allowance",
                policies={"warn_threshold": "0.8"},
                ops=(
                    op(
                        "near", op='"keyops:off_9e_3"', drop=("family",), sub={"tolerances": "float32 = 1e-2"}
                    ),
                ),
            ),
            _run(
                P,
                policies={"warn_threshold": "0.95"},
                ops=(
                    op(
                        "near", op='"keyops:off_9e_3"', drop=("family",), sub={"tolerances": "float32 = 1e-2"}
                    ),
                ),
            ),
        ),
        "policies.headroom_growth_threshold": Pair(
            _diff(W, "headroom_growth_threshold", headroom_growth_threshold="0.1"),
            _diff(P, headroom_growth_threshold="1000.0"),
        ),
        "policies.max_register_increase": _policy("max_register_increase", "registers"),
        "policies.max_spill_increase": _policy("max_spill_increase", "spill"),
        "policies.max_local_memory_increase": _policy("max_local_memory_increase", "local_memory"),
        "policies.max_shared_memory_increase": _policy("max_shared_memory_increase", "shared_memory"),
        "policies.max_instruction_increase_pct": _policy("max_instruction_increase_pct", "instructions"),
        "policies.kernels.<name>.max_register_increase": Pair(
            _diff(F, "registers", extra={'policies.kernels."regs"': {"max_register_increase": "0"}}),
            _diff(
                P,
                max_register_increase="0",
                extra={
                    f'policies.kernels."{k}"': {"max_register_increase": "1000"}
                    for k in ("regs", "spill", "stack", "smem")
                },
            ),
        ),
    }
)


# [[ops]]: each pair two ops of the shared projects.
def _mode(mode: str) -> Pair:
    # script_based and daemon_orchestrated run the reference as upstream does: a script in its own process.
    reference = {"reference": '"ref_script.py"'} if mode in ("script_based", "daemon_orchestrated") else {}
    if mode == "script_based":
        return _op_pair(
            f"mode.{mode}",
            {"op_script": '"script_wrong.py"', **reference},
            {"op_script": '"script_good.py"', **reference},
            "exceed",
            drop=("op",),
            execution_mode='"script_based"',
        )
    return _op_pair(
        f"mode.{mode}",
        {"op": '"keyops:off_1"', **reference},
        {"op": '"keyops:scale"', **reference},
        "exceed",
        execution_mode=f'"{mode}"',
    )


TORCH = ("torch",)
GATHER_DIMS = "V = [6]\nB = [64]\nD = [3]"
VJP = {"backward": "true", "vjp": '"keyops:scale_vjp"', "vjp_reference": '"keyops:scale_vjp"'}


def _index_inputs(**ids: str) -> str:
    fields = {"dims": '["B"]', "dtype": '"int64"', "kind": '"index"', "high": '"V"', **ids}
    return 'table = ["V", "D"]\nids = { ' + ", ".join(f"{k} = {v}" for k, v in fields.items()) + " }"


def _gather(
    key: str,
    breaks: Mapping[str, str],
    keeps: Mapping[str, str],
    says: str,
    *,
    op_b: str = "gather",
    op_k: str = "gather",
    ref: str = "gather_ref",
) -> Pair:
    return _op_pair(
        key,
        {"op": f'"keyops:{op_b}"', "sub_inputs": _index_inputs(**breaks)},
        {"op": f'"keyops:{op_k}"', "sub_inputs": _index_inputs(**keeps)},
        says,
        reference=f'"keyops:{ref}"',
        sub_dims=GATHER_DIMS,
    )


def _refused_op(says: str, *entries: str) -> Case:
    return Case(Project(ops=entries), R, says)


def _torch(pair: Pair) -> Pair:
    return Pair(*(replace(c, project=replace(c.project, needs=TORCH)) for c in (pair.breaks, pair.keeps)))


MATMUL = {
    "schema": '"matmul"',
    "op": '"keyops:matmul"',
    "reference": '"keyops:matmul_ref"',
    "family": '"matmul"',
    "sub_dims": "",
    "sub_inputs": "",
}
REDUCTION = {
    "op": '"keyops:sum16"',
    "reference": '"keyops:sum_ref"',
    "family": '"reduction"',
    "dtypes": '["float16"]',
    "output": '["M"]',
    "sub_dims": "M = [2]\nN = [4096]",
    "sub_inputs": 'x = { dims = ["M", "N"], kind = "positive" }',
}
NO_TABLES = {"dims": "", "inputs": ""}


def _keys(fields: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in fields.items() if not k.startswith("sub_")}


def _subs(fields: Mapping[str, str]) -> dict[str, str]:
    return {k[4:]: v for k, v in fields.items() if k.startswith("sub_")}


ULPS_40 = {"op": '"keyops:ulps_40"'}
PAIRS.update(
    {
        "[ops].name": Pair(_refused_op("named 'dup'", op("dup"), op("dup")), _ops("named", op("named"), P)),
        "[ops].op": _op_pair("[ops].op", {"op": '"keyops:off_1"'}, {"op": '"keyops:scale"'}, "exceed"),
        "[ops].module": _op_pair(
            "[ops].module", {"module": '"keyops:off_1"'}, {"module": '"keyops:scale"'}, "exceed", drop=("op",)
        ),
        "[ops].reference": _op_pair(
            "[ops].reference", {"reference": '"keyops:off_1"'}, {"reference": '"keyops:scale_ref"'}, "exceed"
        ),
        "[ops].family": _op_pair(
            "[ops].family", ULPS_40, {"op": '"keyops:scale"'}, "bound allowance", family='"elementwise"'
        ),
        "[ops].schema": Pair(
            _refused_op(
                "cannot be called as gpuemu-ci calls it",
                op("schema", {**_keys(MATMUL), "op": '"keyops:scale"'}, sub=_subs(MATMUL)),
            ),
            _ops("schema", op("schema", _keys(MATMUL), sub=_subs(MATMUL)), P),
        ),
        "[ops].output": _op_pair(
            "[ops].output", {"output": '["N", "N"]'}, {"output": '["N"]'}, "declared `output`"
        ),
        "[ops].dtypes": Pair(
            _refused_op("float33", op("dtypes", dtypes='["float33"]')),
            _ops("dtypes", op("dtypes", dtypes='["float32", "float16"]'), P),
        ),
        "[ops].output_dtype": _op_pair(
            "[ops].output_dtype",
            {"output_dtype": '"float32"'},
            {"output_dtype": '"float16"'},
            "dtype float16 != expected float32",
            op='"keyops:to_float16"',
        ),
        "[ops].accumulator": _op_pair(
            "[ops].accumulator",
            {"accumulator": '"float32"'},
            {"accumulator": '"float16"'},
            "exceed",
            REDUCTION,
        ),
        "[ops].framework": _torch(
            _op_pair(
                "[ops].framework",
                {"op": '"keyops:scale"'},
                {"op": '"keyops:tscale"'},
                "astype",
                framework='"torch"',
            )
        ),
        "[ops].execution_mode": Pair(
            _refused_op("names no op to run", op("mode", execution_mode='"script_based"', drop=("op",))),
            _ops("mode", op("mode", execution_mode='"callable"'), P),
        ),
        "[ops].op_script": _op_pair(
            "[ops].op_script",
            {"op_script": '"script_wrong.py"', "reference": '"ref_script.py"'},
            {"op_script": '"script_good.py"', "reference": '"ref_script.py"'},
            "exceed",
            drop=("op",),
            execution_mode='"script_based"',
        ),
        "[ops].kwargs": _op_pair(
            "[ops].kwargs",
            {"op": '"keyops:ignores_factor"'},
            {"op": '"keyops:scale"'},
            "exceed",
            kwargs="{ factor = [3.0] }",
        ),
        "[ops].invariants": _non_negative("[ops].invariants", {"invariants": '["non_negative"]'}),
        "[ops].invariant": _non_negative("[ops].invariant", {"invariant": "{ non_negative = true }"}),
        "[ops].layouts": _op_pair(
            "[ops].layouts",
            {"layouts": '["strided"]'},
            {"layouts": '["contiguous"]'},
            "exceed",
            op='"keyops:assumes_contiguous"',
        ),
        "[ops].distributions": _op_pair(
            "[ops].distributions",
            {"distributions": '["boundary"]'},
            {"distributions": '["regular"]'},
            "exceed",
            op='"keyops:clips_large"',
            sub_dims="N = [256]",
        ),
        "[ops].constraints": Pair(
            _refused_op("constraint", op("constraints", constraints='["N % 7 == 0"]')),
            _ops("constraints", op("constraints", op='"keyops:tail_bug"', constraints='["N % 8 == 0"]'), P),
        ),
        "[ops].nonfinite": _op_pair(
            "[ops].nonfinite",
            {"op": '"keyops:drops_nan"'},
            {"op": '"keyops:scale"'},
            "non-finite",
            nonfinite='"propagate"',
            distributions='["boundary"]',
            sub_dims="N = [256]",
        ),
        "[ops].deterministic": _op_pair(
            "[ops].deterministic",
            {"op": '"keyops:flaky"'},
            {"op": '"keyops:scale"'},
            "identical inputs",
            deterministic="true",
        ),
        "[ops].out_arg": _op_pair(
            "[ops].out_arg",
            {"op": '"keyops:writes_half"'},
            {"op": '"keyops:writes_all"'},
            "did not write them",
            out_arg='"out"',
        ),
        "[ops].timeout": _op_pair(
            "[ops].timeout", {"timeout": "1", "op": '"keyops:slow"'}, {"timeout": "30"}, "timeout"
        ),
        "[ops].require_gpu": Pair(
            Case(
                Project(ops=(op("gpu_only", require_gpu="true"),), needs=("no-gpu",)),
                Outcome.SKIPPED,
                "no GPU",
                "gpu_only",
            ),
            _ops("not_gpu_only", op("not_gpu_only", require_gpu="false"), P),
        ),
        "[ops].max_elements": Pair(
            _refused_op("max_elements", op("max_elements", max_elements="0")),
            _ops("max_elements", op("max_elements", max_elements="64"), P),
        ),
        "[ops].intermediates": _op_pair(
            "[ops].intermediates",
            {"precision_reference": "true"},
            {"intermediates": _angle()},
            "exceed",
            ROPE,
        ),
        "ops.intermediates.<name>.effect": _op_pair(
            "ops.intermediates.<name>.effect",
            {"intermediates": _angle(effect='"scale"')},
            {"intermediates": _angle(effect='"rotation"')},
            "exceed",
            ROPE,
        ),
        "ops.intermediates.<name>.max": _op_pair(
            "ops.intermediates.<name>.max",
            {"intermediates": _angle(max='"1"')},
            {"intermediates": _angle(max='"T + position_offset"')},
            "exceed",
            ROPE,
        ),
        "ops.intermediates.<name>.dtype": _op_pair(
            "ops.intermediates.<name>.dtype",
            {"intermediates": _angle(dtype='"float64"')},
            {"intermediates": _angle(dtype='"float32"')},
            "exceed",
            ROPE,
        ),
        "[ops].flush_to_zero": _op_pair(
            "[ops].flush_to_zero",
            {"flush_to_zero": "false"},
            {"flush_to_zero": "true"},
            "exceed",
            op='"keyops:flushes"',
            distributions='["boundary"]',
            sub_dims="N = [512]",
        ),
        "[ops].transcendental_ulps": _op_pair(
            "[ops].transcendental_ulps",
            {"transcendental_ulps": "4"},
            {"transcendental_ulps": "100"},
            "bound allowance",
            ULPS_40,
        ),
        "[ops].bound_c": _op_pair(
            "[ops].bound_c", {"bound_c": "4.0"}, {"bound_c": "100.0"}, "bound allowance", ULPS_40
        ),
        "[ops].precision_reference": Pair(
            _refused_op("precision_reference", op("precision", precision_reference='"yes"')),
            _ops("precision", op("precision", precision_reference="false"), P),
        ),
        "[ops].error_scale": _op_pair(
            "[ops].error_scale",
            {"op": '"keyops:off_1"'},
            {"op": '"keyops:scale"'},
            "exceed",
            family='"custom"',
            error_scale='"keyops:unit_scale"',
        ),
        "[ops].naive": _op_pair(
            "[ops].naive",
            {"naive": '"keyops:scale"'},
            {"naive": '"keyops:off_1e_3"'},
            "exceed",
            op='"keyops:off_1e_3"',
        ),
        "[ops].naive_factor": _op_pair(
            "[ops].naive_factor",
            {"naive_factor": "2.0"},
            {"naive_factor": "10.0"},
            "exceed",
            op='"keyops:off_5e_3"',
            naive='"keyops:off_1e_3"',
        ),
        "[ops].inputs_hook": Pair(
            _run(
                Outcome.INCOMPLETE,
                "inputs hook returned `x` with shape",
                ops=(op("hook", inputs_hook='"keyops:make_inputs_wrong"'),),
            ),
            _ops("hook", op("hook", inputs_hook='"keyops:make_inputs"'), P),
        ),
        "[ops].backward": _torch(
            _op_pair(
                "[ops].backward",
                {"op": '"keyops:tscale_wrong_grad"'},
                {"op": '"keyops:tscale"'},
                "grad of x",
                framework='"torch"',
                backward="true",
            )
        ),
        "[ops].vjp": _op_pair(
            "[ops].vjp",
            {"vjp": '"keyops:scale_vjp_wrong"'},
            {"vjp": '"keyops:scale_vjp"'},
            "grad of x",
            {k: v for k, v in VJP.items() if k != "vjp"},
        ),
        "[ops].vjp_reference": _op_pair(
            "[ops].vjp_reference",
            {"vjp_reference": '"keyops:scale_vjp_wrong"'},
            {"vjp_reference": '"keyops:scale_vjp"'},
            "grad of x",
            {k: v for k, v in VJP.items() if k != "vjp_reference"},
        ),
        "[ops].grad_inputs": Pair(
            _refused_op("grad_inputs", op("grads", VJP, grad_inputs='["y"]')),
            _ops("grads", op("grads", VJP, grad_inputs='["x"]'), P),
        ),
        "[ops].grad_accumulators": Pair(
            _refused_op("float33", op("grad_acc", VJP, grad_accumulators='{ x = "float33" }')),
            _ops("grad_acc", op("grad_acc", VJP, grad_accumulators='{ x = "float32" }'), P),
        ),
        "ops.triton.sanitize": Pair(
            _refused_op("sanitize", op("sanitize", sub={"triton": 'sanitize = "no"'})),
            _ops("sanitize", op("sanitize", sub={"triton": "sanitize = false"}), P),
        ),
        # Behaviour on a kernel that reads masked lanes: tests/triton_cpu (warn passes with the line named,
        # error fails, poison reads NaN); here the spelling is checked.
        "ops.triton.undefined_masked_lanes": Pair(
            _refused_op(
                "undefined_masked_lanes", op("masked", sub={"triton": 'undefined_masked_lanes = "loud"'})
            ),
            _ops("masked", op("masked", sub={"triton": 'undefined_masked_lanes = "error"'}), P),
        ),
        "ops.tolerances.<dtype>": _op_pair(
            "ops.tolerances.<dtype>",
            {"sub_tolerances": "float32 = 1e-6"},
            {"sub_tolerances": "float32 = 1e-2"},
            "allclose allowance",
            op='"keyops:off_1e_3"',
        ),
        "ops.dims.<dim>": Pair(
            _refused_op("N", op("dims", sub={"dims": "N = { min = 8, max = 4 }"})),
            _ops("dims", op("dims", sub={"dims": "N = { min = 1, max = 64, typical = [16] }"}), P),
        ),
        "[ops].inputs": Pair(
            _refused_op("no parameter named 'y'", op("inputs_list", inputs='["y"]', sub=NO_TABLES)),
            _ops("inputs_list", op("inputs_list", inputs='["x"]', sub=NO_TABLES), P),
        ),
        "[ops].input_names": Pair(
            _refused_op("no parameter named 'y'", op("input_names_list", input_names='["y"]', sub=NO_TABLES)),
            _ops("input_names_list", op("input_names_list", input_names='["x"]', sub=NO_TABLES), P),
        ),
        "ops.inputs.<input>": Pair(
            _refused_op("Q", op("inputs", sub={"inputs": 'x = ["N", "Q"]'})),
            _ops("inputs", op("inputs", sub={"inputs": 'x = ["N"]'}), P),
        ),
        "ops.inputs.input_names": Pair(
            _refused_op("Q", op("input_names", sub={"inputs": "", "input_names": 'x = ["Q"]'})),
            _ops("input_names", op("input_names", sub={"inputs": "", "input_names": 'x = ["N"]'}), P),
        ),
        "ops.inputs.<input>.dims": Pair(
            _refused_op("Q", op("in_dims", sub={"inputs": 'x = { dims = ["Q"] }'})),
            _ops("in_dims", op("in_dims", sub={"inputs": 'x = { dims = ["N"] }'}), P),
        ),
        "ops.inputs.<input>.dtype": _op_pair(
            "ops.inputs.<input>.dtype",
            {"sub_inputs": 'x = { dims = ["N"], dtype = "int64" }'},
            {"sub_inputs": 'x = { dims = ["N"], dtype = "float32" }'},
            "dtype int64 != expected float32",
        ),
        "ops.inputs.<input>.kind": _op_pair(
            "ops.inputs.<input>.kind",
            {"sub_inputs": 'x = { dims = ["N"], kind = "any" }'},
            {"sub_inputs": 'x = { dims = ["N"], kind = "positive" }'},
            "invariant `no_nan` violated",
            op='"keyops:sqrt_op"',
            reference='"keyops:sqrt_ref"',
            invariants='["no_nan"]',
        ),
        "ops.inputs.<input>.low": _gather("ops.inputs.<input>.low", {"low": "-1"}, {"low": "0"}, "exceed"),
        "ops.inputs.<input>.high": _gather(
            "ops.inputs.<input>.high", {"high": '"V + 2"'}, {"high": '"V"'}, "index"
        ),
        "ops.inputs.<input>.ignore_value": _gather(
            "ops.inputs.<input>.ignore_value",
            {"ignore_value": "-100"},
            {"ignore_value": "-100"},
            "index",
            op_k="gather_ignoring",
            ref="gather_ignoring_ref",
        ),
        "ops.inputs.<input>.layouts": _op_pair(
            "ops.inputs.<input>.layouts",
            {"sub_inputs": 'x = { dims = ["N"], layouts = ["strided"] }'},
            {"sub_inputs": 'x = { dims = ["N"], layouts = ["contiguous"] }'},
            "exceed",
            op='"keyops:assumes_contiguous"',
        ),
    }
)

INVARIANT_PAIRS: dict[str, Pair] = {
    "shape_preserved": _invariant("shape_preserved", {"op": '"keyops:drops_last"'}, dict(MATMUL)),
    "non_negative": _invariant(
        "non_negative", {}, {"op": '"keyops:square"', "reference": '"keyops:square_ref"'}
    ),
    "finite": _invariant("finite", {"op": '"keyops:inf_op"', "reference": '"keyops:inf_ref"'}, {}),
    "no_nan": _invariant("no_nan", {"op": '"keyops:sqrt_op"', "reference": '"keyops:sqrt_ref"'}, {}),
    "no_inf": _invariant("no_inf", {"op": '"keyops:inf_op"', "reference": '"keyops:inf_ref"'}, {}),
    "symmetric": _invariant(
        "symmetric",
        {"op": '"keyops:identity"', "reference": '"keyops:identity_ref"', **MATRIX},
        {"op": '"keyops:symmetrise"', "reference": '"keyops:symmetrise_ref"', **MATRIX},
    ),
    "normalized": _invariant(
        "normalized", SQUARE_IN, {"op": '"keyops:softmax"', "reference": '"keyops:softmax_ref"', **SQUARE_IN}
    ),
}
PAIRS.update({f"invariant.{name}": pair for name, pair in INVARIANT_PAIRS.items()})
PAIRS.update(
    {
        f"mode.{mode}": _mode(mode)
        for mode in ("callable", "script_based", "client_side", "daemon_orchestrated")
    }
)

# [[kernels]]: lint only (a launch needs a GPU: its keys are refused when wrong, and skipped without one).
SASS = ("nvcc", "sass")
PAIRS.update(
    {
        "[kernels].name": Pair(
            Case(Project(kernels=(kernel("dup"), kernel("dup")), needs=("nvcc",)), R, "named 'dup'"),
            _kernels("named_kernel", kernel("named_kernel"), P),
        ),
        "[kernels].source": Pair(
            _kernels("source__breaks", kernel("source__breaks", "k/broken.cu"), F, "undeclared"),
            _kernels("source__keeps", kernel("source__keeps", "k/scale.cu"), P),
        ),
        "[kernels].archs": Pair(
            Case(Project(kernels=(kernel("archs", archs='["sm_1"]'),), needs=("nvcc",)), R, "sm_1"),
            _kernels("archs", kernel("archs", archs='["sm_80", "sm_90"]'), P),
        ),
        "[kernels].flags": Pair(
            _kernels("flags__breaks", kernel("flags__breaks", flags='["-DBREAK"]'), F, "BREAK"),
            _kernels("flags__keeps", kernel("flags__keeps", flags='["-O3"]'), P),
        ),
        "[kernels].include_dirs": Pair(
            _kernels("incs__breaks", kernel("incs__breaks", include_dirs='["k/nowhere"]'), F, "scale.h"),
            _kernels("incs__keeps", kernel("incs__keeps", include_dirs='["k/inc"]'), P),
        ),
        "[kernels].defines": Pair(
            _kernels("defs__breaks", kernel("defs__breaks", defines='["BREAK"]'), F, "BREAK"),
            _kernels("defs__keeps", kernel("defs__keeps", defines='["OK=1"]'), P),
        ),
        "[kernels].language": Pair(
            Case(Project(kernels=(kernel("language", language='"hip"'),), needs=("nvcc",)), R, "sm_80"),
            _kernels("language", kernel("language", language='"cuda"'), P),
        ),
        "[kernels].entries": Pair(
            Case(Project(kernels=(kernel("entries", entries='["nope"]'),), needs=("nvcc",)), R, "nope"),
            _kernels("entries", kernel("entries", entries='["scale_kernel"]'), P),
        ),
        "kernels.artifact_checks.max_registers": _limit(
            "max_registers", "max_registers", "k/scale.cu", "max_registers"
        ),
        "kernels.artifact_checks.max_regs": _limit("max_regs", "max_regs", "k/scale.cu", "max_registers"),
        "kernels.artifact_checks.max_spills": _limit(
            "max_spills", "max_spills", "k/spills.cu", "max_spills", flags=SPILL_FLAGS
        ),
        "kernels.artifact_checks.max_spill_stores": _limit(
            "max_spill_stores", "max_spill_stores", "k/spills.cu", "max_spill_stores", flags=SPILL_FLAGS
        ),
        "kernels.artifact_checks.max_spill_loads": _limit(
            "max_spill_loads", "max_spill_loads", "k/spills.cu", "max_spill_loads", flags=SPILL_FLAGS
        ),
        "kernels.artifact_checks.max_local_memory": _limit(
            "max_local_memory", "max_local_memory", "k/stack.cu", "max_local_memory"
        ),
        "kernels.artifact_checks.max_local_memory_bytes": _limit(
            "max_local_memory_bytes", "max_local_memory_bytes", "k/stack.cu", "max_local_memory"
        ),
        "kernels.artifact_checks.max_shared_memory": _limit(
            "max_shared_memory", "max_shared_memory", "k/shared.cu", "max_shared_memory"
        ),
        "kernels.artifact_checks.max_shared_memory_bytes": _limit(
            "max_shared_memory_bytes", "max_shared_memory_bytes", "k/shared.cu", "max_shared_memory"
        ),
        "kernels.artifact_checks.required_patterns": _check_pair(
            "required_patterns",
            "k/scale.cu",
            "required_patterns = ['^tex\\.']",
            "required_patterns = ['^ld\\.global']",
            "required ptx pattern",
        ),
        "kernels.artifact_checks.required_instructions": _check_pair(
            "required_instructions",
            "k/scale.cu",
            'required_instructions = ["HMMA"]',
            'required_instructions = ["LDG"]',
            "required sass pattern 'HMMA'",
        ),
        "kernels.artifact_checks.forbidden_patterns": _check_pair(
            "forbidden_patterns",
            "k/scale.cu",
            "forbidden_patterns = ['^ld\\.global']",
            "forbidden_patterns = ['^tex\\.']",
            "forbidden ptx pattern",
        ),
        "kernels.artifact_checks.forbidden_instructions": _check_pair(
            "forbidden_instructions",
            "k/scale.cu",
            'forbidden_instructions = ["LDG"]',
            'forbidden_instructions = ["HMMA"]',
            "forbidden sass pattern 'LDG'",
        ),
        "kernels.launch.kernel": _launch_pair("kernels.launch.kernel", "5", "kernels[0].launch.kernel"),
        "kernels.launch.grid": _launch_pair("kernels.launch.grid", '["ceil(N / Q)"]', "unknown name(s) Q"),
        "kernels.launch.block": _launch_pair("kernels.launch.block", '["Q"]', "unknown name(s) Q"),
        "kernels.launch.args": _launch_pair("kernels.launch.args", '["x", "out", "Q"]', "unknown name(s) Q"),
        "kernels.launch.output": _launch_pair("kernels.launch.output", '["Q"]', "'Q' is not a dim"),
        "kernels.launch.output_dtype": _launch_pair("kernels.launch.output_dtype", '"float33"', "float33"),
        "kernels.launch.shared_mem": _launch_pair(
            "kernels.launch.shared_mem", '"Q * 4"', "unknown name(s) Q"
        ),
    }
)
for _key in ("required_instructions", "forbidden_instructions"):
    _pair = PAIRS[f"kernels.artifact_checks.{_key}"]
    PAIRS[f"kernels.artifact_checks.{_key}"] = Pair(
        _pair.breaks, replace(_pair.keeps, project=replace(_pair.keeps.project, needs=SASS))
    )


def project_text(project: Project, *, extra_sections: Mapping[str, Mapping[str, str]] | None = None) -> str:
    """gpuemu.toml of `project` over the base tables (a key the project sets replaces the base's)."""
    tables: dict[str, dict[str, str]] = {name: dict(keys) for name, keys in BASE_SECTIONS.items()}
    for source in (extra_sections or {}, project.sections):
        for name, keys in source.items():
            tables.setdefault(name, {}).update(keys)
    lines: list[str] = []
    for name, keys in tables.items():
        lines += [f"[{name}]", *(f"{k} = {v}" for k, v in keys.items()), ""]
    for entry in project.ops:
        lines += ["[[ops]]", entry, ""]
    for entry in project.kernels:
        lines += ["[[kernels]]", entry, ""]
    return "\n".join(lines)


def combine(projects: list[Project]) -> Project:
    """The op and kernel entries of `projects` in one project (their sections must be empty)."""
    assert all(not p.sections and not p.args and not p.env for p in projects)
    return Project(
        ops=tuple(e for p in projects for e in p.ops),
        kernels=tuple(e for p in projects for e in p.kernels),
        needs=tuple(dict.fromkeys(n for p in projects for n in p.needs)),
    )
