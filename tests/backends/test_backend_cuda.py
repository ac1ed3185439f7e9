"""[[kernels]] launches: expressions, argument mapping and launch plans (pure Python), and a GPU launch."""

from __future__ import annotations

import textwrap
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from gpuemu_ci.backends import WorkerPool
from gpuemu_ci.backends.cuda import (
    ArgKind,
    KernelProgram,
    compiled_entry,
    kernel_target,
    nvrtc_options,
    plan_launch,
    poisoned_output,
)
from gpuemu_ci.backends.frameworks import bf16_as_bits, bits_as_bf16
from gpuemu_ci.backends.gpu import detect_gpu
from gpuemu_ci.backends.interface import CallTarget, OpTask, TargetKind
from gpuemu_ci.config.expressions import ArrayInfo, LaunchError, evaluate, evaluate_int, parse_expression
from gpuemu_ci.config.model import (
    ErrorModel,
    Family,
    Framework,
    InputSpec,
    KernelLaunch,
    KernelSpec,
    OpShapes,
    OpSpec,
    OpTargets,
)
from tests.backends.support_cases import first_case, op_task


@pytest.mark.parametrize(
    ("text", "env", "value"),
    [
        ("ceil(N / 256)", {"N": 1}, 1),
        ("ceil(N / 256)", {"N": 256}, 1),
        ("ceil(N / 256)", {"N": 257}, 2),
        ("cdiv(N, 128) * 2", {"N": 1000}, 16),
        ("(M * N + 255) // 256", {"M": 3, "N": 100}, 2),
        ("min(N, 1024)", {"N": 4096}, 1024),
        ("max(1, N // 32)", {"N": 7}, 1),
        ("N % 32 - -1", {"N": 70}, 7),
        ("ceil(N / 3) * 3", {"N": 2**62 + 1}, 2**62 + 2),  # exact, no float rounding
        ("floor(7 / 2)", {}, 3),
    ],
)
def test_expressions_evaluate_exactly(text: str, env: dict[str, int], value: int) -> None:
    assert evaluate_int(text, env) == value


def test_division_is_rational() -> None:
    assert evaluate("N / 4", {"N": 6}) == Fraction(3, 2)
    with pytest.raises(LaunchError, match="not an integer"):
        evaluate_int("N / 4", {"N": 6})


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("__import__('os').system('true')", "not allowed"),
        ("N ** 2", "operator Pow is not allowed"),
        ("x.shape", "not allowed"),
        ("N[0]", "not allowed"),
        ("N if N else 1", "not allowed"),
        ("lambda: 1", "not allowed"),
        ("'text'", "not allowed"),
        ("N <", "not a valid expression"),
        ("ceil(1, 2)", "wrong arguments to ceil()"),
        ("stride(x, N)", "literal axis"),
        ("open('f')", "not allowed"),
    ],
)
def test_unsafe_or_malformed_expressions_are_rejected(text: str, words: str) -> None:
    with pytest.raises(LaunchError, match=words):
        parse_expression(text)


def test_unknown_names_and_division_by_zero() -> None:
    with pytest.raises(LaunchError, match="unknown name"):
        parse_expression("ceil(Q / 2)", allowed={"N"})
    with pytest.raises(LaunchError, match="no value"):
        evaluate_int("Q + 1", {"N": 1})
    with pytest.raises(LaunchError, match="division by zero"):
        evaluate_int("N // (N - N)", {"N": 3})
    with pytest.raises(LaunchError, match="longer than"):
        parse_expression("1+" * 200 + "1")


def test_stride_and_size_read_input_layouts() -> None:
    arrays = {"x": ArrayInfo((4, 6), (12, 2))}
    assert evaluate_int("stride(x, 0) + size(x, -1)", {}, arrays) == 18
    with pytest.raises(LaunchError, match="no axis 2"):
        evaluate_int("stride(x, 2)", {}, arrays)


def _program(**changes: object) -> KernelProgram:
    base: dict[str, object] = {
        "source": "kernels/add.cu",
        "entry": "add_rows",
        "grid": ("cdiv(N, 128)", "M"),
        "block": ("128",),
        "args": ("x", "y", "out", "M", "N", "M*N:int64", "alpha:float32", "0.5", "stride(x, 0)"),
        "output_dims": ("M", "N"),
        "input_dims": (("x", ("M", "N")), ("y", ("M", "N"))),
        "shared_mem": "4 * 128",
    }
    base.update(changes)
    return KernelProgram(**base)  # type: ignore[arg-type]


def test_launch_plan_maps_arguments_in_kernel_order() -> None:
    arrays = {"x": ArrayInfo((3, 300), (600, 2)), "y": ArrayInfo((3, 300), (300, 1))}
    plan = plan_launch(_program(), arrays, {"alpha": 1.5})
    assert plan.grid == (3, 3, 1) and plan.block == (128, 1, 1) and plan.shared_mem == 512
    assert plan.out_shape == (3, 300)
    kinds = [(a.kind, a.name or a.value, a.dtype) for a in plan.args]
    assert kinds == [
        (ArgKind.ARRAY, "x", ""),
        (ArgKind.ARRAY, "y", ""),
        (ArgKind.OUT, 0, ""),
        (ArgKind.SCALAR, 3, "int32"),
        (ArgKind.SCALAR, 300, "int32"),
        (ArgKind.SCALAR, 900, "int64"),
        (ArgKind.SCALAR, 1.5, "float32"),
        (ArgKind.SCALAR, 0.5, "float32"),
        (ArgKind.SCALAR, 600, "int32"),
    ]
    assert plan.args[5].scalar().dtype == np.int64
    assert plan.args[6].scalar().dtype == np.float32


def test_launch_plan_rejects_inconsistent_or_impossible_launches() -> None:
    with pytest.raises(LaunchError, match="dim N is 300 in one input and 301"):
        plan_launch(_program(), {"x": ArrayInfo((3, 300), (300, 1)), "y": ArrayInfo((3, 301), (301, 1))}, {})
    ok = {"x": ArrayInfo((3, 300), (300, 1)), "y": ArrayInfo((3, 300), (300, 1))}
    with pytest.raises(LaunchError, match="at most 1024"):
        plan_launch(_program(block=("64", "32")), ok, {"alpha": 1.0})
    with pytest.raises(LaunchError, match="does not fit int32"):
        plan_launch(_program(args=("M * 1000000000",)), ok, {})
    with pytest.raises(LaunchError, match="unknown type"):
        plan_launch(_program(args=("M:int128",)), ok, {})
    with pytest.raises(LaunchError, match="has 1 dims"):
        plan_launch(_program(), {"x": ArrayInfo((3,), (1,)), "y": ArrayInfo((3, 300), (300, 1))}, {})


def test_kernel_target_round_trips_through_its_spec(tmp_path: Path) -> None:
    op = OpSpec(
        name="add_rows",
        dtypes=("float32",),
        targets=OpTargets(op="", reference="refs:add"),
        shapes=OpShapes(
            inputs=(InputSpec("x", ("M", "N")), InputSpec("y", ("M", "N"))), dims=(), output_dims=("M", "N")
        ),
        error_model=ErrorModel(family=Family.ELEMENTWISE),
    )
    launch = KernelLaunch(
        entry="add_rows", grid=("cdiv(N, 128)", "M"), block=("128",), args=("x", "y", "out", "N"),
        output_dims=("M", "N"),
    )  # fmt: skip
    kernel = KernelSpec(
        name="add_rows",
        source=Path("kernels/add.cu"),
        archs=("sm_90",),
        flags=("-O3", "--use_fast_math", "-arch=sm_90", "-lineinfo"),
        include_dirs=(Path("include"),),
        defines=("TILE=128",),
        launch=launch,
        op=op,
    )
    target = kernel_target(kernel, tmp_path)
    assert target.kind is TargetKind.CUDA_KERNEL
    program = KernelProgram.decode(target.spec)
    assert program.entry == "add_rows" and program.input_dims == (("x", ("M", "N")), ("y", ("M", "N")))
    assert program.options == (
        "-DTILE=128",
        f"-I{(tmp_path / 'include').resolve()}",
        "--use_fast_math",
        "-lineinfo",
    )
    assert nvrtc_options(kernel, tmp_path) == program.options
    with pytest.raises(LaunchError, match="malformed"):
        KernelProgram.decode("{}")


def _kernel_task(root: Path, program: KernelProgram, reference: str, schema: str, dtypes: str) -> OpTask:
    task = op_task(root, reference, reference, schema=schema, extra='family = "elementwise"', dtypes=dtypes)
    # As kernel_target makes it: a launch is handed CuPy arrays (a bare NumPy array cannot be a kernel pointer).
    return replace(task, op_target=CallTarget(TargetKind.CUDA_KERNEL, program.encode(), root, Framework.CUPY))


XY = (
    "[ops.dims]\nM = [5]\nN = { min = 1, max = 600, typical = [300] }\n[ops.inputs]\n"
    'x = { dims = ["M", "N"], layouts = ["contiguous"] }\ny = { dims = ["M", "N"], layouts = ["contiguous"] }\n'
)


@pytest.mark.slow
def test_a_kernel_without_gpu_is_an_import_error(tmp_path: Path) -> None:
    (tmp_path / "refs.py").write_text("def add(x, y):\n    return x + y\n")
    try:
        import cupy  # noqa: F401

        pytest.skip("cupy is installed here")
    except ImportError:
        pass
    task = _kernel_task(tmp_path, _program(source="add.cu"), "refs:add", XY, '["float32"]')
    with WorkerPool(1, tmp_path, gpu=None) as pool:
        report = pool.run(task, first_case(task))
    assert report.outcome == "unloadable" and report.unloadable == "op" and "cupy" in report.message


ADD_KERNEL = r"""
extern "C" __global__ void add_rows(const float* x, const float* y, float* out, int M, int N, int x_stride) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y;
    if (col < N && row < M) {
        out[row * N + col] = x[row * x_stride + col] + y[row * N + col];
    }
}
"""


def _add_task(root: Path, code: str | None = None) -> OpTask:
    """ADD_KERNEL in add.cu under `root`, launched over x and y [M, N]; `code` compiled in its place if given."""
    (root / "add.cu").write_text(textwrap.dedent(ADD_KERNEL))
    (root / "refs.py").write_text("def add(x, y):\n    return x + y\n")
    program = KernelProgram(
        source="add.cu",
        entry="add_rows",
        grid=("cdiv(N, 128)", "M"),
        block=("128",),
        args=("x", "y", "out", "M", "N", "stride(x, 0)"),
        output_dims=("M", "N"),
        input_dims=(("x", ("M", "N")), ("y", ("M", "N"))),
        code=code,
    )
    return _kernel_task(root, program, "refs:add", XY, '["float32"]')


@pytest.mark.gpu
def test_cuda_kernel_launch_on_a_gpu(tmp_path: Path) -> None:
    if detect_gpu() is None:
        pytest.skip("no GPU on this machine")
    pytest.importorskip("cupy")
    task = _add_task(tmp_path)
    with WorkerPool(1, tmp_path) as pool:
        for n in range(4):
            report = pool.run(task, first_case(task, n))
            assert report.outcome == "passed", report.message


@pytest.mark.gpu
def test_a_kernel_compiled_from_text_in_memory_runs_that_text_not_the_file(tmp_path: Path) -> None:
    if detect_gpu() is None:
        pytest.skip("no GPU on this machine")
    pytest.importorskip("cupy")
    task = _add_task(tmp_path, code=textwrap.dedent(ADD_KERNEL).replace("] + y[", "] - y["))  # a mutant
    with WorkerPool(1, tmp_path) as pool:
        report = pool.run(task, first_case(task))
    assert report.outcome == "failed", report.message
    assert "] + y[" in (tmp_path / "add.cu").read_text()


def test_the_output_buffer_is_poisoned_in_the_case_dtype_with_bfloat16_as_its_bits() -> None:
    bf16 = poisoned_output((2, 3), "bfloat16")
    assert bf16.dtype == np.uint16 and bf16.shape == (2, 3)  # CuPy has no bfloat16: the kernel gets the bits
    assert np.isnan(bf16.view(ml_dtypes.bfloat16).astype(np.float32)).all()
    assert (
        np.isnan(poisoned_output((4,), "float16")).all()
        and poisoned_output((4,), "float16").dtype == np.float16
    )
    assert poisoned_output((4,), None).dtype == np.float32  # no dtype known: fp32, as CUDA code defaults to
    assert (poisoned_output((3,), "int32") == 0).all()


def test_bfloat16_crosses_to_cupy_as_bits_and_comes_back_only_where_bfloat16_is_expected() -> None:
    values = np.array([[1.5, -2.0], [0.0, 3.25]], dtype=ml_dtypes.bfloat16).T  # a transposed view
    bits = bf16_as_bits(values)
    assert bits.dtype == np.uint16 and bits.strides == values.strides and np.shares_memory(bits, values)
    assert bf16_as_bits(np.ones(2, np.float32)).dtype == np.float32
    (back,) = bits_as_bf16([np.ascontiguousarray(bits)], np.dtype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(back.astype(np.float32), values.astype(np.float32))
    (kept,) = bits_as_bf16([np.arange(3, dtype=np.uint16)], np.dtype(np.float32))
    assert kept.dtype == np.uint16  # a genuine uint16 result of a non-bf16 op is left alone


BF16_SCALE_KERNEL = r"""
#include <cuda_bf16.h>
extern "C" __global__ void scale2(const __nv_bfloat16* x, __nv_bfloat16* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2bfloat16(2.0f * __bfloat162float(x[i]));
}
"""


HALVE_KERNEL = r"""
extern "C" __global__ void halve(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] * 0.5f;
}
"""


@pytest.mark.gpu
@pytest.mark.parametrize(("flags", "flushed"), [((), False), (("-ftz=true",), True)])
def test_a_launch_is_built_with_the_users_flags_alone(flags: tuple[str, ...], flushed: bool) -> None:
    """CuPy's RawModule adds -ftz=true to every compile; the user's nvcc build keeps subnormals unless asked.
    Half the smallest normal float32 is a subnormal: kept by default, flushed to 0 only with -ftz=true."""
    if detect_gpu() is None:
        pytest.skip("no GPU on this machine")
    cupy = pytest.importorskip("cupy")
    program = _program(source="halve.cu", entry="halve", options=flags)
    function = compiled_entry(HALVE_KERNEL, program)
    x = cupy.full(4, np.finfo(np.float32).tiny, dtype=cupy.float32)
    out = cupy.full(4, np.nan, dtype=cupy.float32)
    function((1,), (32,), (x, out, np.int32(4)))
    got = cupy.asnumpy(out)
    assert (got == 0).all() if flushed else (got == np.float32(np.finfo(np.float32).tiny / 2)).all(), got


@pytest.mark.gpu
def test_a_bfloat16_cuda_kernel_launch_on_a_gpu(tmp_path: Path) -> None:
    if detect_gpu() is None:
        pytest.skip("no GPU on this machine")
    pytest.importorskip("cupy")
    (tmp_path / "scale.cu").write_text(BF16_SCALE_KERNEL)
    (tmp_path / "refs.py").write_text("def scale2(x):\n    return 2 * x\n")
    program = KernelProgram(
        source="scale.cu",
        entry="scale2",
        grid=("cdiv(N, 128)",),
        block=("128",),
        args=("x", "out", "N"),
        output_dims=("N",),
        input_dims=(("x", ("N",)),),
    )
    schema = (
        "[ops.dims]\nN = { min = 1, max = 300, typical = [256] }\n"
        '[ops.inputs]\nx = { dims = ["N"], layouts = ["contiguous"] }\n'
    )
    task = _kernel_task(tmp_path, program, "refs:scale2", schema, '["bfloat16"]')
    with WorkerPool(1, tmp_path) as pool:
        report = pool.run(task, first_case(task))
    assert report.outcome == "passed", report.message
