"""Helpers for the backend tests: user code in a temporary root, and ops (from real gpuemu.toml text) to run.

`op_task(root, "backend_ops:add", ...)` writes a one-op config next to the user code and returns what the pool
runs; `first_case(task)` is the op's first planned case. Cases travel as seeds, so a test that needs a
particular input picks the seed (`seed_where`) or lets the op check what it received (it raises otherwise).
"""

from __future__ import annotations

import itertools
import textwrap
from collections.abc import Callable
from pathlib import Path

from gpuemu_ci.backends.interface import CaseSpec, OpTask
from gpuemu_ci.config.load import load_config
from gpuemu_ci.fuzz.case import CaseInputs, build_case
from gpuemu_ci.pipeline.targets import naive_target, op_target, reference_target
from gpuemu_ci.plan.expand import plan_op

USER_OPS = """
import ctypes, os, sys, time
import numpy as np

def add(a, b, scale=1.0):
    return (a + b) * scale

def ref_add(a, b, scale=1.0):
    # the reference contract: contiguous float64 copies of float inputs
    assert a.dtype == np.float64 and a.flags.c_contiguous, (a.dtype, a.strides)
    return (a + b) * scale

def wrong_add(a, b, scale=1.0):
    return (a + b) * scale + 1

def segfault(a, b, **kw):
    print("about to touch address 0", file=sys.stderr, flush=True)
    ctypes.string_at(0)

def abort(a, b, **kw):
    print("aborting now", file=sys.stderr, flush=True)
    os.abort()

def hard_exit(a, b, **kw):
    os._exit(3)

def wait_to_be_killed(a, b, **kw):
    # tells the test its pid (it kills this process from outside), then waits
    with open("killme.pid.tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace("killme.pid.tmp", "killme.pid")
    time.sleep(600)

def hang(a, b, **kw):
    print("going to sleep", flush=True)
    time.sleep(600)

def huge(a, b, **kw):
    return np.empty(1 << 62, dtype=np.uint8)

def sticky_cuda(a, b, **kw):
    # what torch raises after a kernel wrote out of bounds: the CUDA context is unusable from now on
    raise RuntimeError("CUDA error: an illegal memory access was encountered")

class OutOfMemoryError(RuntimeError):  # the name torch.cuda and cupy use
    pass

def device_oom(a, b, **kw):
    raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

def raises(a, b, **kw):
    return _helper(a)

def _helper(a):
    raise ValueError(f"bad shape {a.shape}")

def returns_none(a, b, **kw):
    pass

def returns_dict(a, b, **kw):
    return {"y": a + b}

def returns_objects(a, b, **kw):
    return np.array([object(), object()])

def scribble(a, b, **kw):
    y = a + b
    a[0, 0] = 42.0
    return y

def into_out(a, b, out, **kw):
    np.add(a, b, out=out)

def into_out_partial(a, b, out, **kw):
    np.add(a[:-1], b[:-1], out=out[:-1])

_calls = [0]

def nondeterministic(a, b, **kw):
    _calls[0] += 1
    return a + b + _calls[0]

def big(a, b, **kw):
    return np.ones((1024, 1024), np.float32) * a.sum()  # 4 MiB: more than the first arena

def big_ref(a, b, **kw):
    return np.ones((1024, 1024)) * np.float32(a.astype(np.float32).sum())

def identity(x, **kw):
    return x

def total(a, b, **kw):
    # a scalar loss (reduction="sum"): a 0-d array
    return np.asarray((a + b).sum(dtype=a.dtype))

def ref_total(a, b, **kw):
    return np.asarray((a + b).sum())

def wrong_total(a, b, **kw):
    return np.asarray((a + b)[:-1].sum(dtype=a.dtype))

def ref_identity(x, **kw):
    return x
"""

OP_SCRIPT = """
def run(inputs, **kwargs):
    return inputs["a"] + inputs["b"] * kwargs.get("scale", 1.0)
"""

REF_SCRIPT = """
import numpy as np

def reference(inputs, **kwargs):
    # Over upstream's protocol (script_based) kwargs arrive as strings.
    return np.asarray(inputs["a"]) + np.asarray(inputs["b"]) * float(kwargs.get("scale", 1.0))
"""

BROKEN = """
raise RuntimeError("boom while importing")
"""

PAIR = """
[ops.dims]
M = [4]
N = [6]
[ops.inputs]
a = ["M", "N"]
b = ["M", "N"]
"""

_names = itertools.count()


def write_user_code(root: Path) -> Path:
    (root / "backend_ops.py").write_text(USER_OPS)
    (root / "broken.py").write_text(BROKEN)
    scripts = root / "scripts"
    scripts.mkdir(exist_ok=True)
    (scripts / "op_script.py").write_text(textwrap.dedent(OP_SCRIPT))
    (scripts / "ref_script.py").write_text(textwrap.dedent(REF_SCRIPT))
    return root


def op_task(
    root: Path,
    op: str,
    reference: str = "backend_ops:ref_add",
    *,
    schema: str = PAIR,
    extra: str = 'family = "elementwise"',
    timeout: float = 60.0,
    dtypes: str = '["float32"]',
    out_dir: Path | None = None,
) -> OpTask:
    """A one-op config (written next to the user code) as the pool runs it."""
    name = f"op{next(_names)}"
    target = (
        f'op = "{op}"'
        if ":" in op and not op.endswith(".py")
        else f'execution_mode = "script_based"\nop_script = "{op}"'
    )
    text = (
        f'[project]\nname = "backend-tests"\n[validation]\ndtypes = {dtypes}\nseed = 1\n'
        f'[[ops]]\nname = "{name}"\n{target}\nreference = "{reference}"\n{extra}\n'
        f"timeout = {timeout}\n{textwrap.dedent(schema)}"
    )
    path = root / f"{name}.toml"
    path.write_text(text)
    config = load_config(path, env={"GPUEMU_USER_CONFIG": "none"})
    spec = config.op(name)
    return OpTask(
        key=name,
        op=spec,
        validation=config.validation,
        root=config.root,
        op_target=op_target(spec, config.root),
        reference=reference_target(spec, config.root),
        naive=naive_target(spec, config.root),
        timeout_s=timeout,
        master_seed=1,
        out_dir=out_dir,
    )


def first_case(task: OpTask, n: int = 0) -> CaseSpec:
    ref = plan_op(task.op, 1, task.op.dtypes, 16)[n]
    return CaseSpec(ref.seed, ref.index)


def seed_where(task: OpTask, wanted: Callable[[CaseInputs], bool]) -> CaseSpec:
    """The first case seed (iteration order) whose inputs satisfy `wanted`."""
    for ref in plan_op(task.op, 1, task.op.dtypes, 64):
        if wanted(build_case(task.op, ref.seed, task.root)):
            return CaseSpec(ref.seed, ref.index)
    raise AssertionError("no case of the plan has the wanted inputs")
