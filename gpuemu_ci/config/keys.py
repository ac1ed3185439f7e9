"""Every `gpuemu.toml` key a user may write, with its type, description and an example: the single source of
the generated reference page (docs/config.md, `python3 -m gpuemu_ci.docgen`).

Defaults are not repeated here: `model` names the dataclass field whose default the loader uses, so the page
shows what the code does. tests/docs/test_config_keys.py checks that every key the loader reads is listed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gpuemu_ci.config import model


@dataclass(frozen=True)
class KeyDoc:
    table: str  # the TOML table as a user writes its header: "ci", "[ops]", "ops.inputs.<name>"
    key: str
    type: str
    description: str
    example: str  # TOML value text
    model: str | None = None  # "Class.field": the default comes from that dataclass field
    default: str | None = None  # a default the model does not hold (said in words), or "required"
    aliases: tuple[str, ...] = ()

    def default_text(self) -> str:
        if self.model is not None:
            return _model_default(self.model)
        return self.default or "(none)"


def _model_default(path: str) -> str:
    class_name, field_name = path.split(".")
    cls = getattr(model, class_name)
    for item in dataclasses.fields(cls):
        if item.name == field_name:
            if item.default is not dataclasses.MISSING:
                return _toml(item.default)
            if item.default_factory is not dataclasses.MISSING:
                return _toml(item.default_factory())
            return "required"
    raise KeyError(path)


def _toml(value: object) -> str:
    """A Python default as TOML text (None: not set)."""
    if value is None:
        return "(not set)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


_OPS = "[ops]"
_KERNELS = "[kernels]"

KEYS: tuple[KeyDoc, ...] = (
    # [project]
    KeyDoc("project", "name", "string", "Shown in reports.", '"my-kernels"', default='"unnamed"'),
    KeyDoc("project", "version", "string", "Optional; shown in reports.", '"1.2.0"'),
    KeyDoc(
        "project",
        "framework",
        "numpy | torch | cupy | jax",
        "Default framework of the ops.",
        '"torch"',
        default='"numpy"',
    ),
    # [validation]
    KeyDoc(
        "validation",
        "dtypes",
        "list of dtypes",
        "Default dtypes of every op (config order is kept).",
        '["float32", "float16", "bfloat16"]',
        model="Validation.dtypes",
    ),
    KeyDoc(
        "validation",
        "seed",
        "integer >= 0",
        "Master seed; `--seed` overrides. Not set: 0. Nightly mode picks a fresh one.",
        "12345",
        model="Validation.seed",
    ),
    KeyDoc(
        "validation",
        "check_nan",
        "boolean",
        "NaN positions must match the reference's (false: NaN outputs are not judged).",
        "true",
        model="Validation.check_nan",
    ),
    KeyDoc("validation", "check_inf", "boolean", "Likewise for ±Inf.", "true", model="Validation.check_inf"),
    KeyDoc(
        "validation",
        "bias_z_threshold",
        "number > 0",
        "|z| above which a 16-bit output is flagged as biased.",
        "6.0",
        model="Validation.bias_z_threshold",
    ),
    KeyDoc(
        "validation.tolerances",
        "<dtype>",
        "number (atol) or { atol, rtol }",
        "allclose tolerances for ops WITHOUT a `family`.",
        "{ atol = 1e-3, rtol = 1e-3 }",
    ),
    # [ci]
    KeyDoc(
        "ci",
        "quick_dtypes",
        "list of dtypes",
        "Narrows the quick suite to these dtypes (an op with none of them runs its first). Not set: every dtype "
        "each op declares. Left-out dtypes are named in every report.",
        '["float32"]',
        model="CiSettings.quick_dtypes",
    ),
    KeyDoc(
        "ci",
        "quick_iterations",
        "integer >= 1",
        "Quick suite: cases for each op's first dtype.",
        "16",
        model="CiSettings.quick_iterations",
    ),
    KeyDoc(
        "ci",
        "quick_extra_dtype_iterations",
        "integer >= 1",
        "Quick suite: cases for each further dtype.",
        "8",
        model="CiSettings.quick_extra_dtype_iterations",
    ),
    KeyDoc(
        "ci",
        "thorough_iterations",
        "integer >= 1",
        "Cases per op and dtype in the thorough and nightly suites.",
        "100",
        model="CiSettings.thorough_iterations",
    ),
    KeyDoc(
        "ci",
        "max_elements",
        "integer >= 1",
        "Per input, for sizes the tool chooses (boundary, tile±1); typical sizes and the large class are never "
        "capped. Per op: `max_elements`.",
        "262144",
        model="CiSettings.max_elements",
    ),
    KeyDoc(
        "ci",
        "thorough_timeout",
        "seconds > 0",
        "For the whole run; when it expires, partial results, exit 3.",
        "3600",
        model="CiSettings.thorough_timeout",
    ),
    KeyDoc(
        "ci",
        "case_timeout",
        "seconds > 0",
        "For each side of a case (per op: `timeout`).",
        "60",
        model="CiSettings.case_timeout",
    ),
    KeyDoc(
        "ci",
        "parallel_jobs",
        "integer >= 1",
        "Cases computed at once, one worker process each (`--jobs`). Not set: the cores available.",
        "2",
        model="CiSettings.parallel_jobs",
    ),
    KeyDoc(
        "ci",
        "lint",
        "boolean",
        "Lint `[[kernels]]` inside `run`; a missing nvcc is then exit 3.",
        "true",
        model="CiSettings.lint",
    ),
    KeyDoc(
        "ci",
        "require_gpu",
        "boolean",
        "Ops that need a GPU are errors (not skips) when none is present.",
        "false",
        model="CiSettings.require_gpu",
    ),
    KeyDoc(
        "ci",
        "corpus",
        "directory",
        "The regression corpus, relative to gpuemu.toml: pinned cases every run replays first.",
        '"gpuemu-corpus"',
        model="CiSettings.corpus",
    ),
    # [policies]
    KeyDoc(
        "policies",
        "fail_on_regression",
        "boolean",
        "A regression against the baseline fails the gate.",
        "true",
        model="Policies.fail_on_regression",
    ),
    KeyDoc(
        "policies",
        "warn_threshold",
        "number > 0",
        "Relative growth of an op's headroom that warns.",
        "0.1",
        model="Policies.warn_threshold",
    ),
    KeyDoc(
        "policies",
        "max_register_increase",
        "integer >= 0",
        "Registers a kernel may gain before it regressed (same toolchain only).",
        "8",
        model="Policies.max_register_increase",
    ),
    KeyDoc(
        "policies",
        "max_spill_increase",
        "integer >= 0",
        "Spill bytes a kernel may gain.",
        "0",
        model="Policies.max_spill_increase",
    ),
    KeyDoc(
        "policies",
        "max_local_memory_increase",
        "integer >= 0",
        "Stack bytes a kernel may gain.",
        "0",
        model="Policies.max_local_memory_increase",
    ),
    KeyDoc(
        "policies",
        "max_shared_memory_increase",
        "integer >= 0",
        "Shared-memory bytes a kernel may gain.",
        "0",
        model="Policies.max_shared_memory_increase",
    ),
    KeyDoc(
        "policies",
        "max_instruction_increase_pct",
        "number",
        "PTX/SASS instruction count growth allowed, in %.",
        "10.0",
        model="Policies.max_instruction_increase_pct",
    ),
    KeyDoc(
        "policies.kernels.<name>",
        "max_register_increase",
        "integer >= 0",
        "Per-kernel override of the policy of the same name (also max_spill_increase, max_local_memory_increase, "
        "max_shared_memory_increase, max_instruction_increase_pct).",
        "16",
    ),
    # [[ops]]
    KeyDoc(_OPS, "name", "string", "Unique op name.", '"matmul"', default="required"),
    KeyDoc(
        _OPS,
        "op",
        '"pkg.mod:func" or a script path',
        "The op under test.",
        '"mykernels.gemm:matmul"',
        model="OpTargets.op",
        aliases=("module",),
    ),
    KeyDoc(
        _OPS,
        "reference",
        '"pkg.mod:func" or a script path',
        "The fp64 reference (a script defines `reference(inputs: dict, **kwargs)`).",
        '"mykernels.ref:matmul"',
        model="OpTargets.reference",
    ),
    KeyDoc(
        _OPS,
        "family",
        "elementwise | reduction | scan | softmax | norm | matmul | attention | argmax | exact | custom",
        "Picks the error model. Not set: allclose with per-dtype tolerances.",
        '"matmul"',
        model="ErrorModel.family",
    ),
    KeyDoc(
        _OPS,
        "schema",
        "matmul | attention | elementwise",
        "Upstream's builtin schemas (dims + inputs).",
        '"matmul"',
    ),
    KeyDoc(_OPS, "output", "list of dims", "Output dims.", '["M", "N"]', model="OpShapes.output_dims"),
    KeyDoc(
        _OPS,
        "dtypes",
        "list of dtypes",
        "Dtypes of this op.",
        '["float16", "bfloat16"]',
        default="validation.dtypes",
    ),
    KeyDoc(
        _OPS, "output_dtype", "dtype", "Not set: the case dtype.", '"float16"', model="OpSpec.output_dtype"
    ),
    KeyDoc(
        _OPS,
        "accumulator",
        "dtype",
        "Declared accumulator (u_acc); not set: fp32 for 16-bit inputs.",
        '"float32"',
        model="ErrorModel.accumulator",
    ),
    KeyDoc(
        _OPS,
        "framework",
        "numpy | torch | cupy | jax",
        "Inputs handed over as that framework's tensors.",
        '"torch"',
        default="project.framework",
    ),
    KeyDoc(
        _OPS,
        "execution_mode",
        "callable | script_based",
        "`script_based` runs `op_script`.",
        '"script_based"',
        model="OpTargets.execution_mode",
    ),
    KeyDoc(
        _OPS,
        "op_script",
        "path",
        'The op\'s script for `execution_mode = "script_based"`.',
        '"run_op.py"',
        model="OpTargets.op_script",
    ),
    KeyDoc(
        _OPS,
        "kwargs",
        "table",
        "A list is a set of values to fuzz over (`[[1, 2]]` passes a list); a string naming "
        "dims binds the kwarg to them.",
        '{ alpha = [1.0, 0.5], num_groups = "G" }',
    ),
    KeyDoc(
        _OPS,
        "invariants",
        "list or table",
        "shape_preserved, non_negative, finite, no_nan, no_inf, symmetric, normalized.",
        '["non_negative"]',
        model="ErrorModel.invariants",
        aliases=("invariant",),
    ),
    KeyDoc(
        _OPS,
        "layouts",
        "list of layouts",
        "Memory layouts handed to the op.",
        '["contiguous", "transposed"]',
        model="OpShapes.layouts",
    ),
    KeyDoc(
        _OPS,
        "distributions",
        "list",
        "Value distributions.",
        '["regular", "boundary"]',
        model="OpShapes.distributions",
    ),
    KeyDoc(
        _OPS,
        "constraints",
        "list of conditions",
        "Conditions over dims and kwargs.",
        '["K % 8 == 0"]',
        model="OpShapes.constraints",
    ),
    KeyDoc(
        _OPS,
        "nonfinite",
        "none | propagate",
        '"propagate": NaN/Inf are injected and must propagate like the reference.',
        '"propagate"',
        model="ErrorModel.nonfinite",
    ),
    KeyDoc(
        _OPS,
        "deterministic",
        "boolean",
        "The op is run twice and must be bitwise identical.",
        "true",
        model="Execution.deterministic",
    ),
    KeyDoc(
        _OPS,
        "out_arg",
        "kwarg name",
        "The op writes into this kwarg: a NaN-prefilled buffer; unwritten elements fail.",
        '"out"',
        model="Execution.out_arg",
    ),
    KeyDoc(_OPS, "timeout", "seconds > 0", "Per case for this op.", "30", default="ci.case_timeout"),
    KeyDoc(_OPS, "require_gpu", "boolean", "This op needs a GPU.", "false", model="Execution.require_gpu"),
    KeyDoc(
        _OPS,
        "max_elements",
        "integer >= 1",
        "Per input, for sizes the tool chooses.",
        "65536",
        default="ci.max_elements",
    ),
    KeyDoc(
        _OPS,
        "flush_to_zero",
        "boolean",
        "η becomes the smallest normal.",
        "true",
        model="ErrorModel.flush_to_zero",
    ),
    KeyDoc(
        _OPS,
        "transcendental_ulps",
        "number",
        "k_f: declared ulp error of exp/tanh/... in the op.",
        "4",
        model="ErrorModel.transcendental_ulps",
    ),
    KeyDoc(_OPS, "bound_c", "number", "c in the bound.", "4.0", model="ErrorModel.bound_c"),
    KeyDoc(
        _OPS,
        "precision_reference",
        "boolean",
        "Widen the family bound by the error models the reference measures: its change on inputs moved by one "
        "working-precision rounding, and its run in the working precision.",
        "true",
        model="ErrorModel.precision_reference",
    ),
    KeyDoc(
        _OPS,
        "error_scale",
        '"pkg.mod:func"',
        '`family = "custom"`: returns the error scale.',
        '"pkg.mod:scale"',
        model="OpTargets.error_scale",
    ),
    KeyDoc(
        _OPS,
        "naive",
        '"pkg.mod:func"',
        "A naive same-dtype implementation: the baseline-relative rule.",
        '"pkg.mod:naive"',
        model="OpTargets.naive",
    ),
    KeyDoc(
        _OPS,
        "naive_factor",
        "number",
        "The op's error may be at most this times the naive one's.",
        "2.0",
        model="ErrorModel.naive_factor",
    ),
    KeyDoc(
        _OPS,
        "inputs_hook",
        '"pkg.mod:func"',
        'Builds the input arrays itself (also `inputs = "pkg.mod:func"`).',
        '"pkg.mod:make_inputs"',
        model="OpTargets.inputs_hook",
    ),
    KeyDoc(_OPS, "backward", "boolean", "Check the backward pass too.", "true", default="false"),
    KeyDoc(
        _OPS,
        "vjp",
        '"pkg.mod:func"',
        "Backward of a non-torch op: vjp(**inputs, grad_output=..., **kwargs).",
        '"pkg.mod:vjp"',
        model="Backward.vjp",
    ),
    KeyDoc(
        _OPS,
        "vjp_reference",
        '"pkg.mod:func"',
        "The reference's VJP on NumPy float64 arrays.",
        '"pkg.mod:f"',
        model="Backward.vjp_reference",
    ),
    KeyDoc(
        _OPS,
        "grad_inputs",
        "list of input names",
        "Inputs whose gradient is checked. Not set: every float input that is no index.",
        '["x", "w"]',
    ),
    KeyDoc(
        _OPS,
        "grad_accumulators",
        'table: input name -> dtype or "input"',
        'The dtype a gradient\'s sums are accumulated in, where it is below the working precision (`"input"`: '
        "the input's own dtype). Not set: float32 for 16-bit cases.",
        '{ bias = "input" }',
    ),
    KeyDoc(
        _OPS,
        "intermediates",
        "table: name -> { effect, max, dtype }",
        "Quantities the op computes itself from exact values (angles from integer positions, a scale from a "
        "count), which no input moves and the reference never rounds: the bound counts their rounding (see "
        "[How it decides](how-it-decides.md), intermediates the op computes).",
        '{ angle = { effect = "rotation", max = "T + position_offset" } }',
    ),
    KeyDoc(
        "ops.intermediates.<name>",
        "effect",
        "rotation | scale",
        '"rotation": an angle the op rotates values by (they move by its error times their magnitude); '
        '"scale": a factor the op multiplies by (the output moves by its relative error).',
        '"rotation"',
        default="required",
    ),
    KeyDoc(
        "ops.intermediates.<name>",
        "max",
        "expression over dims and kwargs",
        "The largest |value| in a case (radians for an angle); required for a rotation.",
        '"T + position_offset"',
        model="Intermediate.largest",
    ),
    KeyDoc(
        "ops.intermediates.<name>",
        "dtype",
        "dtype",
        "What the op computes it in. Not set: its working precision (the declared accumulator, else float32 "
        "for 16-bit and float32 cases, float64 for float64 ones).",
        '"float32"',
        model="Intermediate.dtype",
    ),
    KeyDoc(
        "ops.triton",
        "sanitize",
        "boolean",
        "Triton kernels run as a GPU would run them: bounds and race checks, poisoned masked lanes, TF32 "
        "dots, programs in a seeded order (see Triton on CPU). `false`: the plain interpreter.",
        "false",
        model="Execution.triton_sanitize",
    ),
    KeyDoc(
        "ops.tolerances",
        "<dtype>",
        "number (atol) or { atol, rtol }",
        "Switches this op to allclose for these dtypes.",
        "{ atol = 1e-2, rtol = 1e-2 }",
    ),
    KeyDoc(
        "ops.dims",
        "<dim>",
        "sizes, { min, max, typical }, { expr, min, max } or an expression",
        "Symbolic dims shared by inputs and output.",
        "{ min = 1, max = 4096, typical = [256, 1024] }",
    ),
    KeyDoc(
        _OPS,
        "inputs",
        "list of names, a table of inputs, or a hook",
        "The op's inputs: names (each gets dims "
        '[B, S, H]), the `[ops.inputs]` table below, or an inputs hook "pkg.mod:func".',
        '["x"]',
        default="required",
        aliases=("input_names",),
    ),
    KeyDoc(
        "ops.inputs",
        "<input>",
        "list of dims or a table",
        "Input dims (alias table `input_names`).",
        '{ dims = ["K", "N"], dtype = "float16" }',
        aliases=("input_names",),
    ),
    KeyDoc(
        "ops.inputs.<input>",
        "dims",
        "list of dims or sizes",
        "The input's dims.",
        '["B", "T"]',
        default="required",
    ),
    KeyDoc(
        "ops.inputs.<input>", "dtype", "dtype", "Not set: the case dtype.", '"int64"', model="InputSpec.dtype"
    ),
    KeyDoc(
        "ops.inputs.<input>",
        "kind",
        "value kind",
        "What values the input holds.",
        '"index"',
        model="InputSpec.kind",
    ),
    KeyDoc("ops.inputs.<input>", "low", "integer or expression", "Lowest value.", "0", model="InputSpec.low"),
    KeyDoc(
        "ops.inputs.<input>",
        "high",
        "integer or expression",
        "Exclusive upper bound (required for index).",
        '"V"',
        model="InputSpec.high",
    ),
    KeyDoc(
        "ops.inputs.<input>",
        "ignore_value",
        "integer",
        "e.g. ignore_index for class targets.",
        "-100",
        model="InputSpec.ignore_value",
    ),
    KeyDoc(
        "ops.inputs.<input>",
        "layouts",
        "list of layouts",
        "Not set: the op's layouts.",
        '["contiguous"]',
        model="InputSpec.layouts",
    ),
    # [[kernels]]
    KeyDoc(_KERNELS, "name", "string", "Kernel name.", '"gelu"', default="required"),
    KeyDoc(
        _KERNELS,
        "source",
        "path",
        ".cu (compiled with nvcc) or .ptx (assembled with ptxas).",
        '"kernels/gelu.cu"',
        default="required",
    ),
    KeyDoc(
        _KERNELS,
        "archs",
        "list",
        "Not set: the toolchain's default arch.",
        '["sm_80", "sm_90"]',
        model="KernelSpec.archs",
    ),
    KeyDoc(
        _KERNELS, "flags", "list", "Compiler flags.", '["-O3", "--use_fast_math"]', model="KernelSpec.flags"
    ),
    KeyDoc(
        _KERNELS,
        "include_dirs",
        "list of paths",
        "Include directories.",
        '["include"]',
        model="KernelSpec.include_dirs",
    ),
    KeyDoc(_KERNELS, "defines", "list", "Preprocessor defines.", '["BLOCK=128"]', model="KernelSpec.defines"),
    KeyDoc(
        _KERNELS,
        "entries",
        "list",
        "Which kernels of the source to report (not set: all).",
        '["gelu_kernel"]',
        model="KernelSpec.entries",
    ),
    KeyDoc(
        "kernels.artifact_checks",
        "max_registers",
        "integer >= 0",
        "Registers per thread.",
        "64",
        model="ArtifactChecks.max_registers",
        aliases=("max_regs",),
    ),
    KeyDoc(
        "kernels.artifact_checks",
        "max_spills",
        "integer >= 0",
        "Bytes, stores + loads.",
        "0",
        model="ArtifactChecks.max_spills",
    ),
    KeyDoc(
        "kernels.artifact_checks",
        "max_spill_stores",
        "integer >= 0",
        "Spill store bytes.",
        "0",
        model="ArtifactChecks.max_spill_stores",
    ),
    KeyDoc(
        "kernels.artifact_checks",
        "max_spill_loads",
        "integer >= 0",
        "Spill load bytes.",
        "0",
        model="ArtifactChecks.max_spill_loads",
    ),
    KeyDoc(
        "kernels.artifact_checks",
        "max_local_memory",
        "integer >= 0",
        "Stack frame bytes.",
        "0",
        model="ArtifactChecks.max_local_memory",
        aliases=("max_local_memory_bytes",),
    ),
    KeyDoc(
        "kernels.artifact_checks",
        "max_shared_memory",
        "integer >= 0",
        "Shared memory bytes.",
        "49152",
        model="ArtifactChecks.max_shared_memory",
        aliases=("max_shared_memory_bytes",),
    ),
    KeyDoc(
        "kernels.artifact_checks",
        "required_patterns",
        "list of regexes or { pattern, target }",
        'Must occur in the PTX (or SASS with `target = "sass"`).',
        '["fma\\\\.rn"]',
        model="ArtifactChecks.required_patterns",
    ),
    KeyDoc(
        "kernels.artifact_checks",
        "forbidden_patterns",
        "list of regexes or { pattern, target }",
        "Must not occur.",
        '[{ pattern = "LDL", target = "sass" }]',
        model="ArtifactChecks.forbidden_patterns",
        aliases=("forbidden_instructions",),
    ),
    KeyDoc(
        "kernels.launch",
        "kernel",
        "string",
        "Entry to launch (validated through CuPy on a GPU).",
        '"gelu_kernel"',
        default="required",
    ),
    KeyDoc(
        "kernels.launch",
        "grid",
        "list of expressions",
        "Grid dims over dims.",
        '["ceil(N / 256)"]',
        default="required",
    ),
    KeyDoc("kernels.launch", "block", "list of expressions", "Block dims.", "[256]", default="required"),
    KeyDoc(
        "kernels.launch",
        "args",
        "list",
        'Input names, "out", dim names, or literal scalars.',
        '["x", "out", "N"]',
        default="required",
    ),
    KeyDoc(
        "kernels.launch", "output", "list of dims", "The output buffer's dims.", '["N"]', default="required"
    ),
    KeyDoc(
        "kernels.launch",
        "output_dtype",
        "dtype",
        "The buffer the kernel writes (not set: the case dtype).",
        '"float32"',
        model="KernelLaunch.output_dtype",
    ),
    KeyDoc(
        "kernels.launch",
        "shared_mem",
        "expression",
        "Dynamic shared memory bytes.",
        '"4 * 256"',
        model="KernelLaunch.shared_mem",
    ),
)
