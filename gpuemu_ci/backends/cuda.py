"""[[kernels]] entries validated like ops: compiled with CuPy's RawModule (NVRTC) and launched on the GPU.

The launch description (config `KernelLaunch`) is data, never code:
- grid / block / shared_mem / output_dims are integer expressions over the op's dim names and numeric kwargs
  (see config/expressions.py: `+ - * / // %`, `ceil floor min max cdiv stride size`; exact, never `eval`ed).
- args, in kernel order: an input name (its device pointer, at the view's first element), `out` (the
  NaN-prefilled output buffer), or an expression with an optional type suffix: `N` (int32), `N*K:int64`,
  `eps:float32`, `0.5` (float32). Defaults: int32 for integral values, float32 otherwise.
The worker builds a `LaunchPlan` from the input shapes (pure Python, unit-tested without a GPU) and only the
final `launch` touches CuPy.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from gpuemu_ci.backends.frameworks import bf16_as_bits
from gpuemu_ci.backends.interface import CallTarget, TargetKind
from gpuemu_ci.backends.loaded import Loaded, LoadError
from gpuemu_ci.backends.transport import is_float_like, resolve_dtype
from gpuemu_ci.config.expressions import ArrayInfo, LaunchError, evaluate, evaluate_int
from gpuemu_ci.config.model import Framework, KernelSpec

SCALAR_TYPES: dict[str, type[np.generic]] = {
    "int32": np.int32,
    "int64": np.int64,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
}
# NVRTC accepts only some nvcc flags; the others (e.g. -O3, -arch: CuPy picks the device's) are left out.
_NVRTC_FLAG_PREFIXES = (
    "-D",
    "-I",
    "-U",
    "-std",
    "--std",
    "-use_fast_math",
    "--use_fast_math",
    "-lineinfo",
    "--generate-line-info",
    "-G",
    "--device-debug",
    "-ftz",
    "--ftz",
    "-prec-div",
    "--prec-div",
    "-prec-sqrt",
    "--prec-sqrt",
    "-fmad",
    "--fmad",
    "-maxrregcount",
    "--maxrregcount",
    "--restrict",
    "-restrict",
    "--extra-device-vectorization",
)


# ---- programs and launch plans --------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelProgram:
    """Everything the worker needs to compile and launch one kernel (travels as the CallTarget's spec)."""

    source: str  # path relative to the target root
    entry: str
    grid: tuple[str, ...]
    block: tuple[str, ...]
    args: tuple[str, ...]
    output_dims: tuple[str | int, ...]
    input_dims: tuple[tuple[str, tuple[str | int, ...]], ...]  # input name -> its dims, in op order
    output_dtype: str | None = None
    shared_mem: str = "0"
    options: tuple[str, ...] = ()
    code: str | None = None  # compiled instead of the file's text (`gpuemu-ci mutate`: a mutant, in memory)

    def encode(self) -> str:
        """The program as the JSON text a CallTarget's `spec` carries to the worker (keys sorted, so equal
        programs encode equally)."""
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def decode(spec: str) -> KernelProgram:
        """The program back from `encode`'s text; a text that is not one is a LaunchError."""
        try:
            data = json.loads(spec)
            return KernelProgram(
                source=data["source"],
                entry=data["entry"],
                grid=tuple(data["grid"]),
                block=tuple(data["block"]),
                args=tuple(data["args"]),
                output_dims=tuple(data["output_dims"]),
                input_dims=tuple((n, tuple(d)) for n, d in data["input_dims"]),
                output_dtype=data.get("output_dtype"),
                shared_mem=data.get("shared_mem", "0"),
                options=tuple(data.get("options", ())),
                code=data.get("code"),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise LaunchError(f"malformed kernel target spec: {exc}") from None


def nvrtc_options(kernel: KernelSpec, root: Path) -> tuple[str, ...]:
    """The compile options NVRTC understands, from the kernel's flags, defines and include dirs."""
    options = [f"-D{d}" for d in kernel.defines]
    options += [f"-I{(root / inc).resolve()}" for inc in kernel.include_dirs]
    options += [f for f in kernel.flags if f.startswith(_NVRTC_FLAG_PREFIXES)]
    return tuple(options)


def kernel_target(kernel: KernelSpec, root: Path) -> CallTarget:
    """The CallTarget that validates a [[kernels]] entry with a `launch` table (its `op` gives the inputs)."""
    if kernel.launch is None or kernel.op is None:
        raise LaunchError(f"kernel {kernel.name!r} has no launch description or no op schema")
    launch = kernel.launch
    program = KernelProgram(
        source=str(kernel.source),  # relative to root, or absolute (root / absolute == absolute)
        entry=launch.entry,
        grid=launch.grid,
        block=launch.block,
        args=launch.args,
        output_dims=launch.output_dims,
        input_dims=tuple((i.name, i.dims) for i in kernel.op.shapes.inputs),
        output_dtype=launch.output_dtype,
        shared_mem=launch.shared_mem,
        options=nvrtc_options(kernel, root),
    )
    return CallTarget(TargetKind.CUDA_KERNEL, program.encode(), root, Framework.CUPY)


class ArgKind(StrEnum):
    """What a kernel argument is: an input array, the output buffer, or a scalar."""

    ARRAY = "array"
    OUT = "out"
    SCALAR = "scalar"


@dataclass(frozen=True)
class ArgRef:
    """One kernel argument: an input array, the output buffer, or a typed scalar."""

    kind: ArgKind
    name: str = ""  # input name for ARRAY
    value: float | int = 0
    dtype: str = ""  # for SCALAR: a key of SCALAR_TYPES

    def scalar(self) -> np.generic:
        """The scalar argument's value as the NumPy scalar type its declared dtype names (what CuPy passes by
        value)."""
        return SCALAR_TYPES[self.dtype](self.value)


@dataclass(frozen=True)
class LaunchPlan:
    """One launch of a `[[kernels]]` entry for a case: grid, block and dynamic shared memory, the arguments in
    order, the output's shape, and the dims they were computed from."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    args: tuple[ArgRef, ...]
    out_shape: tuple[int, ...]
    dims: tuple[tuple[str, int], ...]


def bind_dims(program: KernelProgram, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    """Dim values from the input shapes, checking that shared dims agree and fixed dims match."""
    dims: dict[str, int] = {}
    for name, spec in program.input_dims:
        if name not in shapes:
            raise LaunchError(f"input {name!r} is missing")
        shape = shapes[name]
        if len(shape) != len(spec):
            raise LaunchError(f"input {name!r} has {len(shape)} dims, the op schema says {len(spec)}")
        for dim, size in zip(spec, shape, strict=True):
            if isinstance(dim, int):
                if dim != size:
                    raise LaunchError(f"input {name!r} has size {size} where the schema fixes {dim}")
            elif dims.setdefault(dim, size) != size:
                raise LaunchError(f"dim {dim} is {dims[dim]} in one input and {size} in {name!r}")
    return dims


def _triple(
    exprs: tuple[str, ...], env: Mapping[str, int | float], arrays: Mapping[str, ArrayInfo], what: str
) -> tuple[int, int, int]:
    if not 1 <= len(exprs) <= 3:
        raise LaunchError(f"{what} needs 1 to 3 expressions, got {len(exprs)}")
    values = [evaluate_int(e, env, arrays) for e in exprs] + [1] * (3 - len(exprs))
    if any(v < 0 for v in values):
        raise LaunchError(f"{what} {tuple(values)} has a negative size")
    return values[0], values[1], values[2]


def _arg(
    text: str, inputs: Iterable[str], env: Mapping[str, int | float], arrays: Mapping[str, ArrayInfo]
) -> ArgRef:
    body, _, type_name = text.partition(":")
    body, type_name = body.strip(), type_name.strip()
    if body == "out" and not type_name:
        return ArgRef(ArgKind.OUT)
    if body in inputs and not type_name:
        return ArgRef(ArgKind.ARRAY, name=body)
    if type_name and type_name not in SCALAR_TYPES:
        raise LaunchError(f"argument {text!r}: unknown type {type_name!r} (one of {', '.join(SCALAR_TYPES)})")
    value = evaluate(body, env, arrays)
    if not type_name:
        type_name = "int32" if value.denominator == 1 else "float32"
    if type_name.startswith(("int", "uint")):
        if value.denominator != 1:
            raise LaunchError(f"argument {text!r} is {float(value):g}, not an integer")
        number: float | int = int(value)
        info = np.iinfo(np.dtype(SCALAR_TYPES[type_name]))
        if not info.min <= number <= info.max:
            raise LaunchError(f"argument {text!r} = {number} does not fit {type_name} (use :int64)")
    else:
        number = float(value)
    return ArgRef(ArgKind.SCALAR, value=number, dtype=type_name)


def plan_launch(
    program: KernelProgram,
    arrays: Mapping[str, ArrayInfo],
    kwargs: Mapping[str, Any] | None = None,
) -> LaunchPlan:
    """Grid, block, shared memory, arguments and output shape for inputs of these shapes (no GPU needed)."""
    dims = bind_dims(program, {n: a.shape for n, a in arrays.items()})
    env: dict[str, int | float] = {
        k: v for k, v in (kwargs or {}).items() if isinstance(v, int | float) and not isinstance(v, bool)
    }
    env.update(dims)
    grid = _triple(program.grid, env, arrays, "grid")
    block = _triple(program.block, env, arrays, "block")
    if math.prod(block) > 1024:
        raise LaunchError(f"block {block} has {math.prod(block)} threads; CUDA allows at most 1024")
    if grid[0] >= 2**31 or grid[1] >= 2**16 or grid[2] >= 2**16:
        raise LaunchError(f"grid {grid} exceeds CUDA's limits (2^31-1, 65535, 65535)")
    shared = evaluate_int(program.shared_mem, env, arrays)
    out_shape = tuple(
        d if isinstance(d, int) else evaluate_int(str(d), env, arrays) for d in program.output_dims
    )
    names = [n for n, _ in program.input_dims]
    args = tuple(_arg(a, names, env, arrays) for a in program.args)
    return LaunchPlan(grid, block, shared, args, out_shape, tuple(sorted(dims.items())))


# ---- the GPU side (worker only) ---------------------------------------------------------------------------

# The worker passes the case's output dtype to a kernel launch under this key (user kwargs are identifiers).
OUTPUT_DTYPE_KWARG = "<output dtype>"


def poisoned_output(shape: tuple[int, ...], dtype_name: str | None) -> np.ndarray:
    """The host image of the output buffer a kernel writes: NaN-filled floats (zeros for other dtypes), so an
    element the kernel never writes fails the comparison. bfloat16, which CuPy cannot name, is laid out as
    its uint16 bits (the worker reads them back as bfloat16)."""
    dtype = resolve_dtype(dtype_name) if dtype_name else np.dtype(np.float32)
    filled = np.full(shape, np.nan if is_float_like(dtype) else 0, dtype=dtype)
    return bf16_as_bits(filled)


def compiled_entry(code: str, program: KernelProgram) -> Any:
    """The kernel's entry compiled by NVRTC with the user's flags and nothing else. `cupy.RawModule(code=...)`
    appends `-ftz=true` to every compile (cupy/cupy#9576), which flushes subnormals where the user's nvcc build
    (default -ftz=false) keeps them: a correct kernel failed every case whose output is subnormal on an H100.
    CuPy's NVRTC front end (which adds the device's arch) compiles it here with the include paths RawModule
    would add, and the binary is loaded as is."""
    from cupy.cuda import compiler, function

    options = tuple(program.options)
    try:  # the include paths RawModule gives NVRTC (CUDA's headers: cuda_bf16.h), and its default -std
        from cupy._core.core import assemble_cupy_compiler_options

        options = assemble_cupy_compiler_options(options)
    except ImportError:
        pass
    try:
        binary, mapping = compiler.compile_using_nvrtc(code, options, name_expressions=(program.entry,))
    except Exception:  # an extern "C" entry needs no name lowering (and a template needs it)
        binary, mapping = compiler.compile_using_nvrtc(code, options)
    module = function.Module()
    module.load(binary)
    return module.get_function((mapping or {}).get(program.entry, program.entry))


def load_kernel(target: CallTarget) -> Any:
    """Compile the kernel (once per worker) and return a Loaded whose invoke launches it."""
    try:
        program = KernelProgram.decode(target.spec)
        import cupy
    except (LaunchError, ImportError) as exc:
        raise LoadError(str(exc)) from None
    path = (target.root / program.source).resolve()
    try:
        code = program.code if program.code is not None else path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LoadError(f"cannot read kernel source {path}: {exc}") from None
    try:
        function = compiled_entry(code, program)
    except Exception as exc:
        changed = " as changed in memory" if program.code is not None else ""
        raise LoadError(f"compiling {path}{changed} (entry {program.entry}) failed: {exc}") from None

    def invoke(inputs: dict[str, Any], kwargs: dict[str, Any]) -> Any:
        kwargs = dict(kwargs)
        case_output = kwargs.pop(OUTPUT_DTYPE_KWARG, None)
        infos = {
            n: ArrayInfo(tuple(a.shape), tuple(s // a.itemsize for s in a.strides)) for n, a in inputs.items()
        }
        plan = plan_launch(program, infos, kwargs)
        out = cupy.asarray(poisoned_output(plan.out_shape, program.output_dtype or case_output))
        if out.size == 0:
            return out
        values = []
        for ref in plan.args:
            if ref.kind is ArgKind.ARRAY:
                values.append(inputs[ref.name])
            elif ref.kind is ArgKind.OUT:
                values.append(out)
            else:
                values.append(ref.scalar())
        function(plan.grid, plan.block, tuple(values), shared_mem=plan.shared_mem)
        return out

    return Loaded(invoke, f"{program.source}:{program.entry}")
