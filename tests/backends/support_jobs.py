"""Helpers for the backend tests: user code written to a temporary root, and job builders."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from gpuemu_ci.backends.interface import CallTarget, CaseJob, TargetKind
from gpuemu_ci.config.model import Framework

USER_OPS = """
import ctypes, os, sys, time
import numpy as np

def add(a, b, scale=1.0):
    return (a + b) * scale

def ref_add(a, b, scale=1.0):
    # the reference contract: contiguous float64 copies of float inputs
    assert a.dtype == np.float64 and a.flags.c_contiguous, (a.dtype, a.strides)
    return (a + b) * scale

def segfault(a, b, **kw):
    print("about to touch address 0", file=sys.stderr, flush=True)
    ctypes.string_at(0)

def abort(a, b, **kw):
    print("aborting now", file=sys.stderr, flush=True)
    os.abort()

def hard_exit(a, b, **kw):
    os._exit(3)

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

def describe(a, b, **kw):
    return np.array(a.strides + b.strides, dtype=np.int64), np.array(a.shape + b.shape, dtype=np.int64)

def _wide(a):
    # everything between the strided view's elements, through a wider view over the same memory
    shape, strides = (a.shape[0], a.shape[1] * 2), (a.strides[0], a.itemsize)
    return np.lib.stride_tricks.as_strided(a, shape=shape, strides=strides)

def with_gaps(a, b, **kw):
    return _wide(a)

def poke_gap(a, b, **kw):
    wide = _wide(a)
    wide[0, 1] = 0.0  # outside the view, inside its buffer
    return a + b

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

def identity(x, **kw):
    return x

def ref_identity(x, **kw):
    return x

def sum_rows(x, **kw):
    return x.sum(axis=-1)
"""

BROKEN = """
raise RuntimeError("boom while importing")
"""

OP_SCRIPT = """
def run(inputs, **kwargs):
    return inputs["a"] + inputs["b"] * kwargs.get("scale", 1.0)
"""

REF_SCRIPT = """
import numpy as np

def reference(inputs, **kwargs):
    return np.asarray(inputs["a"]) + np.asarray(inputs["b"]) * kwargs.get("scale", 1.0)
"""


def write_user_code(root: Path) -> Path:
    (root / "userops.py").write_text(USER_OPS)
    (root / "broken.py").write_text(BROKEN)
    scripts = root / "scripts"
    scripts.mkdir(exist_ok=True)
    (scripts / "op_script.py").write_text(textwrap.dedent(OP_SCRIPT))
    (scripts / "ref_script.py").write_text(textwrap.dedent(REF_SCRIPT))
    return root


def target(
    root: Path, spec: str, kind: TargetKind = TargetKind.CALLABLE, framework: Framework = Framework.NUMPY
) -> CallTarget:
    return CallTarget(kind, spec, root, framework)


def make_job(
    root: Path, op: str, inputs: dict[str, np.ndarray], reference: str = "userops:ref_add", **kw: Any
) -> CaseJob:
    framework = kw.pop("framework", Framework.NUMPY)
    return CaseJob(
        op=target(root, op, framework=framework),
        reference=target(root, reference),
        inputs=inputs,
        **kw,
    )


def pair(rows: int = 4, cols: int = 6) -> dict[str, np.ndarray]:
    a = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols) / 4
    return {"a": a, "b": np.ones((rows, cols), np.float32)}
