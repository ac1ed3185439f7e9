"""The validated configuration: frozen dataclasses built once by `config.load`, trusted afterwards.

Every later stage reads these types and never the raw TOML. A `Config` that exists is valid.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path


class Family(StrEnum):
    """Op family: picks the error model (oracle/bounds.py)."""

    ELEMENTWISE = "elementwise"
    REDUCTION = "reduction"
    SCAN = "scan"
    SOFTMAX = "softmax"
    NORM = "norm"
    MATMUL = "matmul"
    ATTENTION = "attention"
    CUSTOM = "custom"
    EXACT = "exact"  # bitwise equality with the reference rounded to the output dtype
    ARGMAX = "argmax"  # the op returns the index of the largest of the scores the reference returns


class Framework(StrEnum):
    """What kind of arrays the op receives and returns."""

    NUMPY = "numpy"
    TORCH = "torch"
    CUPY = "cupy"
    JAX = "jax"
    TENSORFLOW = "tensorflow"


# Upstream gpuemu's spelling of a framework -> ours (`framework = "pytorch"` is upstream's default).
FRAMEWORK_SPELLINGS = {"pytorch": Framework.TORCH}


class ExecutionMode(StrEnum):
    """How the reference is run (upstream's `execution_mode`); the op itself is always run by the gate.

    CALLABLE (no `execution_mode`) and CLIENT (`client_side`): the reference is called in the judge worker
    (a "pkg.mod:func", or a script's `reference(inputs, **kwargs)` imported). SCRIPT (`script_based`): the
    reference script is a subprocess speaking upstream's stdin/stdout JSON protocol (kept warm when it defines
    `reference`). DAEMON (`daemon_orchestrated`): one persistent reference process (per worker) reused across cases."""

    CALLABLE = "callable"
    SCRIPT = "script_based"
    CLIENT = "client_side"
    DAEMON = "daemon_orchestrated"


class MaskedLanes(StrEnum):
    """`[ops.triton] undefined_masked_lanes`: what to do when an op's outputs depend on masked-off lanes of a
    Triton load without `other` (undefined in Triton's language; NVIDIA and AMD read 0, as the layer does)."""

    WARN = "warn"  # a warning naming the kernel and line; the case is judged on the 0 the GPU reads
    ERROR = "error"  # the case fails (kind undefined_masked_lanes)
    IGNORE = "ignore"  # neither (and no second call to find out)
    POISON = "poison"  # a portability check: the lanes read NaN/+Inf/-Inf (loud integers) in the judged call


# Every `execution_mode` a config may name: upstream's three, and `callable` (what no `execution_mode` means).
EXECUTION_MODES: dict[str, ExecutionMode] = {
    "client_side": ExecutionMode.CLIENT,
    "script_based": ExecutionMode.SCRIPT,
    "daemon_orchestrated": ExecutionMode.DAEMON,
    "callable": ExecutionMode.CALLABLE,
}


class Suite(StrEnum):
    """How many cases each op runs (`--suite`)."""

    QUICK = "quick"
    THOROUGH = "thorough"
    NIGHTLY = "nightly"


class Layout(StrEnum):
    """Real memory layouts handed to the op (fuzz/layouts.py)."""

    CONTIGUOUS = "contiguous"
    TRANSPOSED = "transposed"
    STRIDED = "strided"
    BROADCAST = "broadcast"
    ODD_SIZE1 = "odd_size1"
    ROW_PADDED = "row_padded"  # a slice x[..., :N] of a wider buffer: inner stride 1, row stride > N


class Distribution(StrEnum):
    """Value distributions (fuzz/values.py)."""

    REGULAR = "regular"
    BOUNDARY = "boundary"
    ADVERSARIAL = "adversarial"


class NonFinite(StrEnum):
    """What the op promises about NaN/Inf. NONE: inputs never hold them; PROPAGATE: they are injected and the
    output must match the reference's non-finite class exactly."""

    NONE = "none"
    PROPAGATE = "propagate"


@dataclass(frozen=True)
class Tolerance:
    """allclose semantics: |y - r| <= atol + rtol * |r|."""

    atol: float
    rtol: float = 0.0


@dataclass(frozen=True)
class Invariants:
    """`[ops.invariants]`: properties every output must have, whatever its error."""

    shape_preserved: bool = False
    non_negative: bool = False
    finite: bool = False
    no_nan: bool = False
    no_inf: bool = False
    symmetric: bool = False
    normalized: bool = False

    def enabled(self) -> tuple[str, ...]:
        """The names of the invariants turned on, in INVARIANT_NAMES's order."""
        return tuple(name for name in INVARIANT_NAMES if getattr(self, name))


INVARIANT_NAMES: tuple[str, ...] = (
    "shape_preserved",
    "non_negative",
    "finite",
    "no_nan",
    "no_inf",
    "symmetric",
    "normalized",
)


@dataclass(frozen=True)
class DimSpec:
    """A symbolic dimension. `typical` are the user's sizes; `low`/`high` bound the sizes the fuzzer adds.

    A dim may be *derived* (`C = "G * CPG"`: `derived` holds the expression over dims and kwargs), and the
    range and typical sizes of a drawn dim may name other dims (`max = "D"`, `typical = ["D"]`): then
    `min_expr`, `max_expr` and the strings in `typical_terms` are evaluated per case, and `typical`, `low`
    and `high` hold static estimates (the values at the other dims' typical sizes and range ends) for code
    that only needs an idea of the size."""

    name: str
    typical: tuple[int, ...]
    low: int
    high: int
    derived: str | None = None
    min_expr: str | None = None
    max_expr: str | None = None
    typical_terms: tuple[int | str, ...] = ()  # as declared (sizes and expressions); empty: `typical`
    line: int | None = None

    @property
    def is_derived(self) -> bool:
        """Whether the dim is computed from others rather than drawn."""
        return self.derived is not None

    @property
    def terms(self) -> tuple[int | str, ...]:
        """The typical sizes as written (expressions included), else the resolved ones."""
        return self.typical_terms or self.typical


@dataclass(frozen=True)
class DimConstraint:
    """A condition over dims and kwargs (`D % 2 == 0`, `CB in (1, B)`, `L + 2*padding >= kernel_size`); kept as
    text, validated at load (config/expressions.py, logic mode) and evaluated on candidate dims."""

    expression: str
    line: int | None = None


class ValueKind(StrEnum):
    """What an input holds, beyond its dtype."""

    ANY = "any"  # the case's value distribution
    POSITIVE = "positive"
    PROBABILITIES = "probabilities"  # rows sum to 1
    LOG_PROBABILITIES = "log_probabilities"
    AFFINE_WEIGHT = "affine_weight"  # near 1 (norm gamma)
    INDEX = "index"  # integers in [low, high) (embedding ids, class targets)
    SORTED_OFFSETS = "sorted_offsets"  # non-decreasing, from 0 to the bound (ragged batches)
    COS_SIN = "cos_sin"  # values in [-1, 1] (no table structure; kept for older configs)
    COS = "cos"  # a rotary cos table: cos(theta) with the matching `sin` input, halves repeated
    SIN = "sin"  # ... and its sin table (same theta as the op's `cos` input of the same shape)


@dataclass(frozen=True)
class InputSpec:
    """One input tensor of an op. `dtype` None means "the case dtype"."""

    name: str
    dims: tuple[str | int, ...]
    dtype: str | None = None
    kind: ValueKind = ValueKind.ANY
    low: int | str | None = None  # int, or a dim name
    high: int | str | None = None
    ignore_value: int | None = None  # e.g. ignore_index for class targets
    layouts: tuple[Layout, ...] | None = None  # None: the op's layouts


@dataclass(frozen=True)
class OpTargets:
    """What runs: the op under test, its fp64 reference, and the user's hooks (all `pkg.mod:attr` or a
    script path relative to the config)."""

    op: str  # "pkg.mod:func", a script path, or a dotted module path (upstream's `module`); empty: op_script
    reference: str  # "pkg.mod:func" or a path to a script defining `reference(inputs: dict, **kwargs)`
    framework: Framework = Framework.NUMPY
    execution_mode: ExecutionMode = ExecutionMode.CALLABLE
    op_script: str | None = None
    naive: str | None = None  # baseline-relative rule: a naive same-dtype implementation
    inputs_hook: str | None = None  # "pkg.mod:make_inputs"
    error_scale: str | None = None  # custom family: "pkg.mod:error_scale"


DEFAULT_MAX_ELEMENTS = 1 << 18  # per input: keeps a case fast on a CPU runner (`ci.max_elements`)


@dataclass(frozen=True)
class OpShapes:
    """What the op's inputs look like: symbolic dims, the inputs, the output's dims, constraints between
    dims, kwargs to fuzz over, and the layouts and value distributions to draw."""

    inputs: tuple[InputSpec, ...]
    dims: tuple[DimSpec, ...]
    output_dims: tuple[str | int, ...] | None = None
    constraints: tuple[DimConstraint, ...] = ()
    kwargs: tuple[tuple[str, tuple[object, ...]], ...] = ()  # name -> candidate values to fuzz over
    layouts: tuple[Layout, ...] = tuple(Layout)
    distributions: tuple[Distribution, ...] = tuple(Distribution)
    kwarg_bindings: tuple[
        tuple[str, str], ...
    ] = ()  # kwarg name -> expression over dims (`num_groups = "G"`)
    max_elements: int = DEFAULT_MAX_ELEMENTS  # per input, for sizes the tool chooses (ci.max_elements or own)
    # Where the inputs came from when the config lists none (config/infer_inputs.py), said in words; None:
    # declared in gpuemu.toml.
    inferred: str | None = None

    def dim(self, name: str) -> DimSpec | None:
        """The declared dim of this name, if any."""
        return next((d for d in self.dims if d.name == name), None)


class IntermediateEffect(StrEnum):
    """How an intermediate the op computes itself moves its output (oracle/declared_intermediates.py)."""

    ROTATION = "rotation"  # an angle the op rotates values by: they move by its error times their magnitude
    SCALE = "scale"  # a factor the op multiplies by: its output moves by the factor's relative error


@dataclass(frozen=True)
class Intermediate:
    """`[ops.intermediates.<name>]`: a quantity the op computes from exact values (positions, a count) in a
    precision of its own, which the reference, computing from the same exact values in float64, never rounds."""

    name: str
    effect: IntermediateEffect
    dtype: str | None = None  # what the op computes it in; None: its working precision (bounds.py u_acc)
    largest: str | None = None  # `max`: an expression over dims and kwargs, the largest |value| (rotation)


@dataclass(frozen=True)
class ErrorModel:
    """How the output is judged: the family's error bound (or explicit tolerances), invariants, and what the
    op promises about non-finite values."""

    family: Family | None = None  # None: no error model declared -> allclose with per-dtype defaults
    tolerances: tuple[tuple[str, Tolerance], ...] = ()  # dtype -> tolerance (switches to allclose)
    invariants: Invariants = field(default_factory=Invariants)
    nonfinite: NonFinite = NonFinite.NONE
    accumulator: str | None = None  # declared accumulator dtype (oracle u_acc)
    flush_to_zero: bool = False
    transcendental_ulps: float = 4.0  # k_f in the bound
    bound_c: float = 4.0
    naive_factor: float = 2.0
    # Widen the family bound by the reference's change on inputs moved by one working-precision rounding
    # (oracle/conditioning.py); `precision_reference = false` turns the measurement off.
    precision_reference: bool = True
    intermediates: tuple[Intermediate, ...] = ()  # `[ops.intermediates]`

    def tolerance_for(self, dtype: str) -> Tolerance | None:
        """The explicit tolerance for this dtype (which switches the op to allclose), if any."""
        return dict(self.tolerances).get(dtype)


@dataclass(frozen=True)
class Execution:
    """How a case is run: checks that re-run it, where the output goes, and limits."""

    deterministic: bool = False
    out_arg: str | None = None  # name of a kwarg the op writes its output into
    timeout_s: float | None = None
    require_gpu: bool = False
    amd_gpu: bool = False  # a HIP kernel's launch: only an AMD GPU can run it
    # `[ops.triton] sanitize`: Triton kernels run under the GPU-faithful layer (gpuemu_ci/triton_cpu): bounds
    # and race checks, masked lanes as the GPU reads them, bf16/fp8 as real numbers, TF32 dots, programs in a
    # seeded order.
    triton_sanitize: bool = True
    triton_masked_lanes: MaskedLanes = MaskedLanes.WARN  # `[ops.triton] undefined_masked_lanes`


@dataclass(frozen=True)
class Backward:
    """`backward = true`: the op's backward pass is checked too (backends/backward.py, oracle/gradients.py).

    Torch ops are differentiated through autograd; other frameworks give `vjp` ("pkg.mod:func", called with the
    inputs as keyword arguments, `grad_output` and the kwargs, returning the gradients). The reference's
    gradients come from torch autograd in float64, or from `vjp_reference` (same calling convention, NumPy
    float64 arrays) for references torch cannot differentiate."""

    grad_inputs: tuple[str, ...]  # the inputs that require a gradient (default: every float input)
    vjp: str | None = None
    vjp_reference: str | None = None
    # `grad_accumulators`: input name -> the dtype its gradient's sums are accumulated in, as the op declares it
    # (INPUT_DTYPE: the input's own dtype, 16-bit in 16-bit cases); oracle/gradient_accumulators.py.
    accumulators: tuple[tuple[str, str], ...] = ()

    def accumulator_of(self, name: str) -> str | None:
        """The declared accumulator dtype of this input's gradient (`grad_accumulators`), if any."""
        return dict(self.accumulators).get(name)


# `grad_accumulators = { bias = "input" }`: the gradient is summed in its input's own dtype, whatever the case's.
INPUT_DTYPE = "input"


@dataclass(frozen=True)
class OpSpec:
    """One `[[ops]]` entry (or the validation part of a launchable `[[kernels]]` entry)."""

    name: str
    dtypes: tuple[str, ...]
    targets: OpTargets
    shapes: OpShapes
    error_model: ErrorModel = field(default_factory=ErrorModel)
    execution: Execution = field(default_factory=Execution)
    output_dtype: str | None = None  # None: the case dtype (the first output's, when given per output)
    line: int | None = None  # line of this [[ops]] table in gpuemu.toml
    backward: Backward | None = None  # `backward = true`: the gradients are checked too
    # `output_dtype = ["float16", "float32"]`: one per output, in the order the op returns them (an attention
    # returning its output in the case dtype and its log-sum-exp in float32). Empty: every output in output_dtype.
    output_dtypes: tuple[str, ...] = ()

    def dtype_of_output(self, position: int, case_dtype: str) -> str:
        """The dtype the op's output at `position` must have."""
        if position < len(self.output_dtypes):
            return self.output_dtypes[position]
        return self.output_dtype or case_dtype


class KernelLanguage(StrEnum):
    """What a `[[kernels]]` source is written in: CUDA (nvcc or NVRTC, ptxas) or HIP (clang for AMD GPUs)."""

    CUDA = "cuda"
    HIP = "hip"


# What a pattern can be matched against, per kernel language; the first is where a plain string goes.
PATTERN_TARGETS: dict[KernelLanguage, tuple[str, ...]] = {
    KernelLanguage.CUDA: ("ptx", "sass"),
    KernelLanguage.HIP: ("amdgcn", "llvm-ir"),  # the AMDGPU disassembly (llvm-objdump), the device LLVM IR
}


@dataclass(frozen=True)
class PatternCheck:
    """A regex that must (required) or must not (forbidden) match the kernel's PTX or SASS (CUDA), or its
    AMDGPU disassembly or LLVM IR (HIP). `why` says how the target was chosen when the config did not name it
    ("written as a SASS mnemonic", ...), for messages."""

    pattern: str
    target: str = "ptx"  # "ptx" | "sass" | "amdgcn" | "llvm-ir"
    why: str | None = None


@dataclass(frozen=True)
class ArtifactChecks:
    """Limits from [kernels.artifact_checks]. None means "no limit"."""

    max_registers: int | None = None
    max_spills: int | None = None  # bytes, stores + loads
    max_spill_stores: int | None = None
    max_spill_loads: int | None = None
    max_local_memory: int | None = None  # bytes (stack frame)
    max_shared_memory: int | None = None  # bytes
    required_patterns: tuple[PatternCheck, ...] = ()
    forbidden_patterns: tuple[PatternCheck, ...] = ()


@dataclass(frozen=True)
class KernelLaunch:
    """How to launch a [[kernels]] entry through CuPy on a GPU and validate it like an op."""

    entry: str  # kernel (entry) name in the source
    grid: tuple[str, ...]  # expressions over dims, e.g. "ceil(N / 256)"
    block: tuple[str, ...]
    args: tuple[str, ...]  # input names, "out", dim names, or literal scalars
    output_dims: tuple[str | int, ...]
    output_dtype: str | None = None  # None: the case dtype
    shared_mem: str = "0"


@dataclass(frozen=True)
class KernelSpec:
    """A `[[kernels]]` entry: a CUDA or HIP source compiled and linted per arch (and launched where it says how)."""

    name: str
    source: Path
    archs: tuple[str, ...]  # empty: toolchain default
    flags: tuple[str, ...] = ()
    include_dirs: tuple[Path, ...] = ()
    defines: tuple[str, ...] = ()
    entries: tuple[str, ...] = ()  # kernel names to report; empty: every entry in the source
    artifact_checks: ArtifactChecks = field(default_factory=ArtifactChecks)
    launch: KernelLaunch | None = None
    op: OpSpec | None = None  # numerical validation through CuPy when `launch` is given
    line: int | None = None
    language: KernelLanguage = KernelLanguage.CUDA  # `language`, else from the suffix (.hip: HIP)


@dataclass(frozen=True)
class KernelDeltaOverride:
    """[policies.kernels."<kernel or entry name>"]: per-kernel deltas; None inherits [policies]."""

    max_register_increase: int | None = None
    max_spill_increase: int | None = None
    max_local_memory_increase: int | None = None
    max_shared_memory_increase: int | None = None
    max_instruction_increase_pct: float | None = None


@dataclass(frozen=True)
class Policies:
    """`[policies]`: what a regression against the baseline does, and when headroom warns."""

    fail_on_regression: bool = True
    # Upstream's meaning: the share of its allowance an op's worst case may use before a warning (headroom >= it).
    warn_threshold: float = 0.8
    headroom_growth_threshold: float = 0.1  # relative growth of headroom against the baseline that warns
    # +8: registers are allocated in blocks (per warp, 8 per thread on current GPUs), so a smaller change
    # rarely moves occupancy; a compiler bump is reported as toolchain_changed, never counted.
    max_register_increase: int = 8
    max_spill_increase: int = 0
    max_local_memory_increase: int = 0
    max_shared_memory_increase: int = 0
    max_instruction_increase_pct: float = 10.0
    kernel_overrides: tuple[tuple[str, KernelDeltaOverride], ...] = ()


@dataclass(frozen=True)
class CiSettings:
    """`[ci]`: the suites' sizes, jobs, timeouts and what a run may skip."""

    quick_dtypes: tuple[str, ...] | None = None  # None: every dtype each op declares
    quick_iterations: int = 16  # the 16 quick coverage slots, for an op's first dtype (plan/expand.py)
    quick_extra_dtype_iterations: int = 8  # the first 8 of them for each further dtype
    thorough_iterations: int = 100
    thorough_timeout: float = 3600.0  # seconds for the whole run
    case_timeout: float = 60.0  # seconds for one case
    parallel_jobs: int | None = None  # None: the cores available
    lint: bool = True
    require_gpu: bool = False
    corpus: str | None = None  # regression corpus directory, relative to gpuemu.toml (gpuemu-ci corpus add)
    max_elements: int = DEFAULT_MAX_ELEMENTS  # per input, for sizes the tool chooses (not the typical ones)
    allow_skips: bool = (
        False  # a run with skipped ops or cases may pass ("passed with N skipped"), not exit 3
    )
    allow_unchecked: bool = False  # a rule that could not be checked warns instead of failing its kernel


@dataclass(frozen=True)
class Validation:
    """`[validation]`: the dtypes, seed and checks that apply to every op unless it says otherwise."""

    dtypes: tuple[str, ...] = ("float32",)
    seed: int | None = None
    # Upstream's meaning: true fails any NaN (Inf) in an output, whatever the reference holds. Off, non-finite
    # values are still compared with the reference (a NaN where it is finite is a mismatch).
    check_nan: bool = False
    check_inf: bool = False
    tolerances: tuple[tuple[str, Tolerance], ...] = ()
    bias_z_threshold: float = 6.0


@dataclass(frozen=True)
class Project:
    """`[project]`: the project's name, version and default framework."""

    name: str = "unnamed"
    version: str | None = None
    framework: Framework = Framework.NUMPY


@dataclass(frozen=True)
class Config:
    """A whole gpuemu.toml, read and checked."""

    path: Path  # the gpuemu.toml that was read
    root: Path  # its directory: relative paths and imports resolve from here
    sha256: str  # of the file's bytes
    project: Project
    validation: Validation
    ops: tuple[OpSpec, ...]
    kernels: tuple[KernelSpec, ...]
    policies: Policies
    ci: CiSettings
    # What the loader did that the user should hear about (inputs inferred, files not read), printed by the CLI.
    notes: tuple[str, ...] = ()

    def op(self, name: str) -> OpSpec:
        """The op of this name; KeyError where there is none."""
        for op in self.ops:
            if op.name == name:
                return op
        raise KeyError(name)

    @property
    def kernel_ops(self) -> tuple[OpSpec, ...]:
        """The launchable [[kernels]] (those with a launch table), each validated like an op on a GPU."""
        return tuple(k.op for k in self.kernels if k.launch is not None and k.op is not None)
