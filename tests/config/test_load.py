"""gpuemu.toml loading: both upstream forms, aliases, user defaults, and a clear exit-2 error for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuemu_ci.config.load import find_config, load_config
from gpuemu_ci.config.model import Config, Family, Layout, Tolerance
from gpuemu_ci.errors import ConfigError, ExitCode

OPS_FILE = {"m/__init__.py": "", "m/ops.py": "def f(x):\n    return x\n"}

BASE = """
[[ops]]
name = "copy"
op = "m.ops:f"
reference = "m.ops:f"
family = "exact"
[ops.dims]
N = [8]
[ops.inputs]
x = ["N"]
"""


def load_text(make_project, text: str, files: dict[str, str] = OPS_FILE) -> Config:
    return load_config(make_project(text, files))


def error_of(make_project, text: str, files: dict[str, str] = OPS_FILE) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_text(make_project, text, files)
    assert info.value.exit_code is ExitCode.USAGE
    return info.value


def test_quickstart_example_loads_with_lines():
    config = load_config(Path(__file__).parents[2] / "examples" / "quickstart" / "gpuemu.toml")
    names = [op.name for op in config.ops]
    assert names == ["softmax", "rmsnorm", "matmul", "gelu", "cumsum", "attention"]
    text = config.path.read_text().splitlines()
    for op in config.ops:  # each op's line is its [[ops]] header
        assert op.line is not None and text[op.line - 1].strip() == "[[ops]]"
    assert config.op("matmul").error_model.family is Family.MATMUL
    assert config.validation.seed == 20261122


def test_both_tolerance_forms_and_both_invariant_forms(make_project):
    config = load_text(
        make_project,
        """
        [validation.tolerances]
        float32 = 1e-4
        float16 = { atol = 1e-2, rtol = 1e-3 }
        [[ops]]
        name = "a"
        op = "m.ops:f"
        reference = "m.ops:f"
        invariants = ["non_negative", "finite"]
        [ops.dims]
        N = [8]
        [ops.inputs]
        x = ["N"]
        [[ops]]
        name = "b"
        op = "m.ops:f"
        reference = "m.ops:f"
        [ops.invariants]
        shape_preserved = true
        no_nan = false
        [ops.dims]
        N = [8]
        [ops.inputs]
        x = ["N"]
    """,
    )
    a, b = config.ops
    # No family: allclose with the global tolerances (upstream semantics).
    assert a.error_model.tolerance_for("float32") == Tolerance(1e-4, 0.0)
    assert a.error_model.tolerance_for("float16") == Tolerance(1e-2, 1e-3)
    assert a.error_model.invariants.enabled() == ("non_negative", "finite")
    assert b.error_model.invariants.enabled() == ("shape_preserved",)


def test_documented_aliases_are_accepted(make_project, tmp_path):
    (tmp_path / "k.cu").write_text("__global__ void k(float* x) { x[0] = 1.0f; }\n")
    config = load_text(
        make_project,
        """
        [[ops]]
        name = "a"
        module = "m.ops:f"
        reference = "m.ops:f"
        input_names = ["x"]
        [[kernels]]
        name = "k"
        source = "k.cu"
        [kernels.artifact_checks]
        max_local_memory_bytes = 0
        forbidden_instructions = ["ld\\\\.local"]
    """,
    )
    op = config.ops[0]
    assert op.targets.op == "m.ops:f"
    assert [i.name for i in op.shapes.inputs] == ["x"]
    checks = config.kernels[0].artifact_checks
    assert checks.max_local_memory == 0
    assert checks.forbidden_patterns[0].pattern == "ld\\.local"


def test_alias_and_canonical_together_is_an_error(make_project):
    error = error_of(make_project, BASE.replace('op = "m.ops:f"', 'op = "m.ops:f"\nmodule = "m.ops:f"'))
    assert "`op` and `module` mean the same" in error.message


def test_unknown_key_names_file_line_and_closest_key(make_project):
    error = error_of(make_project, BASE.replace('family = "exact"', 'family = "exact"\ntolerence = 1e-3'))
    assert "unknown key `tolerence`" in error.message
    assert "did you mean `tolerances`" in error.message
    assert error.line == 7  # BASE opens with a blank line: [[ops]] is line 2
    assert error.message.startswith(str(error.path))


def test_misspelled_section_is_an_error(make_project):
    error = error_of(make_project, "[validaton]\nseed = 3\n" + BASE)
    assert "unknown key `validaton`" in error.message and "`validation`" in error.message


def test_syntax_error_has_line_and_column(make_project):
    error = error_of(make_project, BASE + "\n[ci\n")
    assert "TOML syntax error" in error.message
    assert error.line == 12
    assert "column" in error.message


@pytest.mark.parametrize(
    ("snippet", "expected"),
    [
        ('[ci]\nparallel_jobs = "four"\n', "expected an integer"),
        ("[ci]\nparallel_jobs = 0\n", "must be at least 1"),
        ('[validation]\ndtypes = ["float33"]\n', "unknown dtype 'float33' (did you mean `float32`?)"),
        ("[validation]\nseed = -1\n", "must be at least 0"),
        ('[policies]\nfail_on_regression = "yes"\n', "expected true or false"),
    ],
)
def test_wrong_types_and_values(make_project, snippet, expected):
    assert expected in error_of(make_project, snippet + BASE).message


def test_op_without_anything_to_test_is_refused(make_project):
    error = error_of(make_project, BASE.replace('op = "m.ops:f"\n', ""))
    assert "names no op to run" in error.message and 'module = "pkg.mod:function"' in error.message


def test_script_based_without_op_or_op_script_is_refused(make_project):
    error = error_of(make_project, BASE.replace('op = "m.ops:f"', 'execution_mode = "script_based"'))
    assert "names no op to run" in error.message and "op_script" in error.message


def test_undeclared_dim_and_missing_reference_file(make_project):
    assert "dim 'K'" in error_of(make_project, BASE.replace('x = ["N"]', 'x = ["N", "K"]')).message
    assert (
        "file not found: nope.py"
        in error_of(make_project, BASE.replace('reference = "m.ops:f"', 'reference = "nope.py"')).message
    )


def test_dim_forms_and_layout_choice(make_project):
    config = load_text(
        make_project,
        BASE.replace("N = [8]", "N = { min = 1, max = 300, typical = [64, 256] }").replace(
            'family = "exact"', 'family = "exact"\nlayouts = ["contiguous", "transposed"]'
        ),
    )
    (dim,) = config.ops[0].shapes.dims
    assert (dim.typical, dim.low, dim.high) == ((64, 256), 1, 300)
    assert config.ops[0].shapes.layouts == (Layout.CONTIGUOUS, Layout.TRANSPOSED)
    assert (
        "typical sizes [500] lie outside"
        in error_of(
            make_project, BASE.replace("N = [8]", "N = { min = 1, max = 300, typical = [500] }")
        ).message
    )


def test_discovery_walks_up_and_missing_config_is_exit_2(tmp_path, make_project):
    path = make_project(BASE, OPS_FILE)
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    assert find_config(nested) == path
    with pytest.raises(ConfigError) as info:
        find_config(Path("/"))
    assert "no gpuemu.toml found" in info.value.message


def test_user_defaults_apply_under_the_project_file(make_project, tmp_path, monkeypatch):
    user = tmp_path / "user.toml"
    user.write_text("[ci]\nparallel_jobs = 3\ncase_timeout = 9\n[validation]\nseed = 11\n")
    monkeypatch.setenv("GPUEMU_USER_CONFIG", str(user))
    config = load_config(make_project("[ci]\ncase_timeout = 5\n" + BASE, OPS_FILE))
    assert config.ci.parallel_jobs == 3  # from the user file
    assert config.ci.case_timeout == 5.0  # the project wins
    assert config.validation.seed == 11
    user.write_text("[[ops]]\nname = 'x'\n")
    with pytest.raises(ConfigError) as info:
        load_config(config.path)
    assert "live in the repository's gpuemu.toml" in info.value.message


def test_per_kernel_policy_overrides(make_project):
    config = load_text(
        make_project,
        """
        [policies]
        max_register_increase = 2
        [policies.kernels."gelu"]
        max_register_increase = 8
        max_instruction_increase_pct = 25
    """
        + BASE,
    )
    assert config.policies.max_register_increase == 2
    ((name, override),) = config.policies.kernel_overrides
    assert name == "gelu" and override.max_register_increase == 8 and override.max_spill_increase is None
    assert (
        "unknown key `max_registers_increase`"
        in error_of(make_project, '[policies.kernels."g"]\nmax_registers_increase = 1\n' + BASE).message
    )


KERNEL = """
[[kernels]]
name = "scale"
source = "scale.cu"
reference = "m.ops:f"
family = "elementwise"
{kernel_extra}
[kernels.dims]
N = [8]
[kernels.inputs]
x = ["N"]
[kernels.launch]
kernel = "scale"
grid = [1]
block = [32]
args = ["x", "out", "N"]
output = ["N"]
{launch_extra}
"""


def test_a_launch_output_dtype_is_checked_and_becomes_the_kernel_ops_output_dtype(make_project):
    files = {**OPS_FILE, "scale.cu": 'extern "C" __global__ void scale(const float* x, float* y, int n) {}\n'}

    def kernel(kernel_extra: str = "", launch_extra: str = "") -> str:
        return BASE + KERNEL.format(kernel_extra=kernel_extra, launch_extra=launch_extra)

    config = load_text(make_project, kernel(launch_extra='output_dtype = "bf16"'), files)
    (spec,) = config.kernels
    assert spec.launch is not None and spec.op is not None
    assert spec.launch.output_dtype == "bfloat16" and spec.op.output_dtype == "bfloat16"
    default_op = load_text(make_project, kernel(), files).kernels[0].op
    assert default_op is not None and default_op.output_dtype is None  # the case dtype

    error = error_of(make_project, kernel(launch_extra='output_dtype = "bfloat61"'), files)
    assert "unknown dtype 'bfloat61'" in error.message and "did you mean `bfloat16`" in error.message
    assert error.line is not None

    error = error_of(
        make_project,
        kernel(kernel_extra='output_dtype = "float32"', launch_extra='output_dtype = "float16"'),
        files,
    )
    assert "'float16'" in error.message and "'float32'" in error.message and "once" in error.message


KERNEL_2D = """
[[kernels]]
name = "add"
source = "add.cu"
reference = "m.ops:f"
family = "elementwise"
[kernels.dims]
M = [4]
N = [8]
[kernels.inputs]
x = {x}
y = ["M", "N"]
[kernels.launch]
kernel = "add"
grid = [1]
block = [32]
args = {args}
output = ["M", "N"]
"""


def test_a_kernel_input_is_drawn_only_in_layouts_whose_strides_its_launch_passes(make_project):
    files = {**OPS_FILE, "add.cu": 'extern "C" __global__ void add(const float* x, float* y, int n) {}\n'}

    def layouts(args: str, x: str = '["M", "N"]') -> dict[str, set[str]]:
        (kernel,) = load_text(make_project, BASE + KERNEL_2D.format(x=x, args=args), files).kernels
        assert kernel.op is not None
        return {i.name: {lay.value for lay in i.layouts or ()} for i in kernel.op.shapes.inputs}

    # A bare pointer: only layouts addressed like C order (odd_size1 changes only size-1 dims' strides).
    bare = layouts('["x", "y", "out", "M", "N"]')
    assert bare == {"x": {"contiguous", "odd_size1"}, "y": {"contiguous", "odd_size1"}}
    # The row stride of x: its row-padded slices too; y is still handed C order only.
    rows = layouts('["x", "y", "out", "M", "N", "stride(x, 0)"]')
    assert rows["x"] == {"contiguous", "odd_size1", "row_padded"} and rows["y"] == bare["y"]
    # Both strides (a negative dim counts from the end): every layout.
    every = layouts('["x", "y", "out", "M", "N", "stride(x, 0)", "stride(x, -1)"]')
    assert every["x"] == {lay.value for lay in Layout}

    # Asked for by name, a layout the kernel cannot address is a config error that says what to pass.
    error = error_of(
        make_project,
        BASE + KERNEL_2D.format(x='{ dims = ["M", "N"], layouts = ["strided"] }', args='["x", "y", "out"]'),
        files,
    )
    assert "'strided'" in error.message and "stride(x, 0), stride(x, 1)" in error.message
    assert "[kernels.launch]" in error.message


def test_a_kernel_built_with_flushed_subnormals_is_judged_as_such(make_project):
    """The launch is compiled with the kernel's own flags: `--use_fast_math` or `-ftz=true` flush subnormals
    there, so its op allows a flushed subnormal; a later `-ftz=false`, or no such flag, does not."""
    files = {**OPS_FILE, "scale.cu": 'extern "C" __global__ void scale(const float* x, float* y, int n) {}\n'}

    def flushes(flags: str) -> bool:
        config = load_text(
            make_project, BASE + KERNEL.format(kernel_extra=f"flags = {flags}", launch_extra=""), files
        )
        op = config.kernels[0].op
        assert op is not None
        return op.error_model.flush_to_zero

    assert flushes('["--use_fast_math"]') and flushes('["-ftz=true"]')
    assert not flushes("[]") and not flushes('["-O3"]') and not flushes('["--use_fast_math", "-ftz=false"]')
