"""Every `gpuemu.toml` key a user may write, with its type, description and an example: the single source of
the generated reference page (docs/config.md, `python3 -m gpuemu_ci.docgen`).

Defaults are not repeated here: `model` names the dataclass field whose default the loader uses, so the page
shows what the code does. tests/docs/test_config_keys.py checks that every key the loader reads is listed, and
tests/config/test_every_key.py that every key, alias, invariant and mode listed here has a config that breaks
it (it fails, or is refused) and one that keeps it (it passes). `upstream` says, for a key gpuemu also reads,
what it means there where that differs from what it means here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gpuemu_ci.config import model
from gpuemu_ci.config.model import EXECUTION_MODES, INVARIANT_NAMES


@dataclass(frozen=True)
class KeyDoc:
    """One key of gpuemu.toml as the reference page documents it."""

    table: str  # the TOML table as a user writes its header: "ci", "[ops]", "ops.inputs.<name>"
    key: str
    type: str
    description: str
    example: str  # TOML value text
    model: str | None = None  # "Class.field": the default comes from that dataclass field
    default: str | None = None  # a default the model does not hold (said in words), or "required"
    aliases: tuple[str, ...] = ()
    upstream: str | None = None  # gpuemu's meaning where it differs from ours (and how ours differs)

    @property
    def names(self) -> tuple[str, ...]:
        """The key and its aliases, each as `table.key`."""
        return tuple(f"{self.table}.{name}" for name in (self.key, *self.aliases))

    def default_text(self) -> str:
        """The default as the page shows it (the model's default where the key has one), else "(none)"."""
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
        "numpy | torch (or pytorch) | cupy | jax | tensorflow",
        "Default framework of the ops (upstream's default, pytorch, must be written).",
        '"torch"',
        default='"numpy"',
        upstream='gpuemu: "pytorch" (its default), "jax" or "tensorflow", the adapter its Python client loads. '
        "Here: the arrays each op is called with.",
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
        "Master seed; `--seed` overrides. Not set: 0, fixed. `0` written, as upstream: a fresh seed per run "
        "(recorded in results.json). Nightly mode picks a fresh one.",
        "12345",
        model="Validation.seed",
        upstream="gpuemu: 0 (its default) draws a random seed per run. Here 0 is a seed like any other, so a run "
        "replays; only the nightly suite draws a fresh seed (and records it).",
    ),
    KeyDoc(
        "validation",
        "check_nan",
        "boolean",
        "true: any NaN in an output fails its case, whatever the reference holds there. false: that rule is "
        "off, and NaN is judged against the reference like any value (a NaN where the reference is finite "
        "still fails).",
        "true",
        model="Validation.check_nan",
        upstream="Same meaning; gpuemu's default is true. Here it is false: a reference may produce NaN "
        "legitimately on the fuzzer's boundary values and injected NaN (`nonfinite`), and a NaN the reference "
        "does not produce fails either way.",
    ),
    KeyDoc(
        "validation",
        "check_inf",
        "boolean",
        "Likewise for ±Inf: true fails any infinite output (an overflow the reference makes too included).",
        "true",
        model="Validation.check_inf",
        upstream="Same meaning; gpuemu's default is true, here false (see `check_nan`).",
    ),
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
        upstream="gpuemu applies them to every op (its daemon reads only the number form, as atol). Here an op "
        "with a `family` is judged by its error bound instead; these apply to ops without one.",
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
        upstream='gpuemu\'s default is ["float32"] (and its code never reads the key). Here, not set runs every '
        "dtype each op declares.",
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
        upstream="gpuemu: the limit of a thorough (non-quick) run only. Here it limits every suite.",
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
        upstream="gpuemu: ops validated at once (default 1). Here: cases, whichever op they belong to.",
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
        "allow_skips",
        "boolean",
        "Lets a run whose ops or cases were skipped (no GPU, Triton's interpreter on bfloat16, a case larger "
        'than the machine\'s memory) pass: exit 0, verdict "passed with N skipped" (`--allow-skips`). Not set: '
        "such a run exits 3, whatever else passed.",
        "true",
        model="CiSettings.allow_skips",
    ),
    KeyDoc(
        "ci",
        "allow_unchecked",
        "boolean",
        "Lets a rule that could not be checked (a SASS pattern without a SASS tool or cubin, a limit ptxas did "
        'not report) pass as a "not checked" warning. Not set: it fails its kernel.',
        "true",
        model="CiSettings.allow_unchecked",
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
        "number in (0, 1]",
        "A passing op x dtype whose worst case uses at least this share of its allowance (headroom >= it) "
        "gets a warning, in the terminal, the comment, the step summary, annotations and results.json.",
        "0.8",
        model="Policies.warn_threshold",
        upstream="Same meaning (gpuemu's code never reads it). The allowance is the error bound for ops with a "
        "`family`, atol + rtol |r| for the others.",
    ),
    KeyDoc(
        "policies",
        "headroom_growth_threshold",
        "number > 0",
        "Against a baseline: relative growth of an op's worst headroom that warns (0.1: 10% worse).",
        "0.1",
        model="Policies.headroom_growth_threshold",
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
        '"pkg.mod:func", a dotted module or a script path',
        "The op under test; a dotted module (upstream's `module`): its function named like the op.",
        '"mykernels.gemm:matmul"',
        model="OpTargets.op",
        aliases=("module",),
        upstream="gpuemu reads `module` (a dotted module path) and never calls it. Here it is the op that is "
        'tested: "package.module:function" or a script path.',
    ),
    KeyDoc(
        _OPS,
        "reference",
        '"pkg.mod:func" or a script path',
        "The fp64 reference (a script defines `reference(inputs: dict, **kwargs)` or reads upstream's JSON "
        "on stdin).",
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
        _OPS,
        "output_dtype",
        "dtype or list of dtypes",
        "Not set: the case dtype. A list gives one dtype per output, in the order the op returns them "
        '(`["float16", "float32"]`: an output and its float32 log-sum-exp).',
        '"float16"',
        model="OpSpec.output_dtype",
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
        "numpy | torch (or pytorch) | cupy | jax | tensorflow",
        "Inputs handed over as that framework's tensors.",
        '"torch"',
        default="project.framework",
    ),
    KeyDoc(
        _OPS,
        "execution_mode",
        "client_side | script_based | daemon_orchestrated | callable",
        "How the reference runs: not set, callable or client_side, in the judge worker; script_based, a subprocess "
        "over upstream's JSON protocol (warm when it defines `reference`); daemon_orchestrated, one warm "
        "process per worker.",
        '"script_based"',
        default="(not set: as client_side)",
        upstream="gpuemu's client_side and daemon_orchestrated compare the reference with its own output in its "
        "`test`/`fuzz`/`ci` commands (the op's output is a placeholder). Here every mode runs the op and judges it "
        "against the reference; the mode says how the reference runs.",
    ),
    KeyDoc(
        _OPS,
        "op_script",
        "path",
        "The op's script for `execution_mode = \"script_based\"` (`run(inputs)`, or upstream's protocol).",
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
        "shape_preserved (the output has the reference output's shape), non_negative, finite, no_nan, no_inf, "
        "symmetric, normalized.",
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
        "Triton kernels run as a GPU would run them: bounds and race checks, masked lanes read as the GPU "
        "reads them, bfloat16 and fp8 as real numbers, TF32 dots, programs in a seeded order (see Triton on "
        "CPU). `false`: the plain interpreter (its bfloat16 and fp8 cases are not judged).",
        "false",
        model="Execution.triton_sanitize",
    ),
    KeyDoc(
        "ops.triton",
        "undefined_masked_lanes",
        '"warn", "error", "ignore" or "poison"',
        "What an output that depends on masked-off lanes of a load without `other` does (Triton leaves them "
        "undefined; NVIDIA and AMD read 0, and the case is judged on that 0). `warn` (default): a warning "
        "naming the kernel and line; `error`: the case fails; `ignore`: neither; `poison`: a portability "
        "check, the lanes read NaN, +Inf and -Inf in the judged call.",
        '"error"',
        model="Execution.triton_masked_lanes",
    ),
    KeyDoc(
        "ops.tolerances",
        "<dtype>",
        "number (atol) or { atol, rtol }",
        "Switches this op to allclose for these dtypes.",
        "{ atol = 1e-2, rtol = 1e-2 }",
        upstream="gpuemu: per-dtype overrides of [validation.tolerances]. Here too, and on an op with a `family` "
        "they replace its error bound for those dtypes.",
    ),
    KeyDoc(
        "ops.dims",
        "<dim>",
        "a size, sizes, { min, max, typical }, { expr, min, max } or an expression",
        "Symbolic dims shared by inputs and output. A bare size pins the dim (`D = 64`: only 64 is drawn); a "
        "list gives typical sizes, with boundary sizes from 1 to the largest drawn as well (`D = [64]`).",
        "{ min = 1, max = 4096, typical = [256, 1024] }",
    ),
    KeyDoc(
        _OPS,
        "inputs",
        "list of names, a table of inputs, or a hook",
        "The op's inputs: names (each gets dims "
        '[B, S, H]), the `[ops.inputs]` table below, or an inputs hook "pkg.mod:func". Not set: the names '
        "are read from the op's parameters or the keys its reference reads (a builtin schema when they fit "
        "one), and the run prints the keys it used.",
        '["x"]',
        default="read from the code",
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
        ".cu (compiled with nvcc), .ptx (assembled with ptxas) or .hip (compiled with clang for AMD GPUs).",
        '"kernels/gelu.cu"',
        default="required",
        upstream="gpuemu reads the file as PTX text, a .cu source included. Here a .cu is compiled per arch.",
    ),
    KeyDoc(
        _KERNELS,
        "language",
        "string",
        '"cuda" or "hip". A HIP kernel is linted per gfx arch from the AMDGPU compiler\'s own figures (VGPRs, '
        "AGPRs, SGPRs, scratch, LDS, spilled registers, occupancy); its patterns match its disassembly "
        '(`target = "amdgcn"`, the default) or its LLVM IR (`"llvm-ir"`). See [HIP kernels](hip.md).',
        '"hip"',
        default='"hip" for a .hip source, else "cuda"',
    ),
    KeyDoc(
        _KERNELS,
        "archs",
        "list",
        'Not set: the toolchain\'s default arch (sm_80; gfx90a for HIP). HIP kernels take gfx archs ("gfx90a", '
        '"gfx1030", "gfx90a:xnack+").',
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
        upstream="gpuemu sums the PTX's virtual register declarations and defaults to 64 (its docs say 128). "
        "Here: the registers ptxas allocates, and no limit unless set.",
    ),
    KeyDoc(
        "kernels.artifact_checks",
        "max_spills",
        "integer >= 0",
        "Bytes, stores + loads.",
        "0",
        model="ArtifactChecks.max_spills",
        upstream="gpuemu counts PTX `ld/st.local` instructions, default 0. Here: spill bytes ptxas reports "
        "(stores + loads), no limit unless set.",
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
        upstream="Same meaning; gpuemu's default is 0 (and it ignores the `_bytes` spelling its docs use). Here: "
        "no limit unless set.",
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
        "Must occur in the kernel's PTX or SASS. Without a `target`, an upper-case pattern (`HMMA`, `MUFU.EX2`) "
        "is matched against the SASS, a lower-case one (`fma\\\\.rn`) against the PTX; a pattern with no letters "
        "against the SASS under `required_instructions`, the PTX under `required_patterns`. A SASS pattern "
        "with no SASS tool fails its kernel as not checked (see `ci.allow_unchecked`).",
        '["fma\\\\.rn", "HMMA"]',
        model="ArtifactChecks.required_patterns",
        aliases=("required_instructions",),
        upstream="gpuemu: substrings searched in the PTX text only, so SASS mnemonics never match. Here: regexes, "
        "each against the listing its spelling names.",
    ),
    KeyDoc(
        "kernels.artifact_checks",
        "forbidden_patterns",
        "list of regexes or { pattern, target }",
        "Must not occur; the listing is chosen as for `required_patterns` (`LDG.E.SYS`: SASS).",
        '["LDG.E.SYS", { pattern = "ld\\\\.local", target = "ptx" }]',
        model="ArtifactChecks.forbidden_patterns",
        aliases=("forbidden_instructions",),
        upstream="gpuemu: substrings searched in the PTX text only (and `forbidden_instructions` is ignored), "
        'so its documented example `["LDG.E.SYS", "STG.E.SYS"]` checks nothing. Here: regexes, SASS mnemonics '
        "against the SASS.",
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

# Besides the keys: the values a config may name that each switch a check or a way of running on.
INVARIANTS: tuple[str, ...] = INVARIANT_NAMES
MODES: tuple[str, ...] = tuple(EXECUTION_MODES)


def differences() -> tuple[KeyDoc, ...]:
    """The keys gpuemu also reads whose meaning (or default) differs here."""
    return tuple(k for k in KEYS if k.upstream)
