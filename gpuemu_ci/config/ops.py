"""Parsing of [[ops]] tables (and the op part of a launchable [[kernels]] entry) into OpSpec."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path

from gpuemu_ci.config.dimgraph import Schema
from gpuemu_ci.config.expressions import parse_expression
from gpuemu_ci.config.infer_inputs import defines_function, infer_input_names
from gpuemu_ci.config.intermediates import parse_intermediates
from gpuemu_ci.config.model import (
    EXECUTION_MODES,
    FRAMEWORK_SPELLINGS,
    INPUT_DTYPE,
    INVARIANT_NAMES,
    Backward,
    CiSettings,
    DimSpec,
    Distribution,
    ErrorModel,
    Execution,
    ExecutionMode,
    Family,
    Framework,
    InputSpec,
    Invariants,
    Layout,
    MaskedLanes,
    NonFinite,
    OpShapes,
    OpSpec,
    OpTargets,
    Project,
    Tolerance,
    Validation,
    ValueKind,
)
from gpuemu_ci.config.reader import TableReader
from gpuemu_ci.config.schema import (
    BUILTIN_SCHEMAS,
    DEFAULT_DIMS,
    DIM_NAME,
    E,
    canonical_dtype,
    check_dtype,
    dim_list,
    dims_table,
    enum_list,
    kwargs_table,
    parse_constraint,
    parse_inputs,
)
from gpuemu_ci.errors import ConfigError

OP_ALIASES = {"module": "op", "input_names": "inputs", "invariant": "invariants"}


def tolerances(table: TableReader | None) -> tuple[tuple[str, Tolerance], ...]:
    """Both forms: `float16 = 1e-2` (atol) and `float16 = { atol = 1e-2, rtol = 1e-3 }`."""
    if table is None:
        return ()
    result: list[tuple[str, Tolerance]] = []
    for key in list(table._data):
        check_dtype(key, f"{table.where}", table.source, table.line_of(key))
        value = table.raw(key)
        if isinstance(value, bool):
            raise table.error(key, "expected a number (atol) or { atol, rtol }")
        if isinstance(value, (int, float)):
            tol = Tolerance(atol=float(value))
        elif isinstance(value, dict):
            sub = TableReader(value, f"{table.where}.{key}", table.source, table.line_of(key))
            tol = Tolerance(atol=sub.number("atol", 0.0) or 0.0, rtol=sub.number("rtol", 0.0) or 0.0)
            sub.finish()
        else:
            raise table.error(key, "expected a number (atol) or { atol, rtol }")
        if tol.atol < 0 or tol.rtol < 0:
            raise table.error(key, "tolerances must not be negative")
        result.append((canonical_dtype(key), tol))
    table.finish()
    return tuple(result)


def _invariants(table: TableReader) -> Invariants:
    """Both forms: a list of names, or a table of name = bool."""
    raw = table.raw("invariants")
    if raw is None:
        return Invariants()
    if isinstance(raw, list):
        if not all(isinstance(v, str) for v in raw):
            raise table.error("invariants", "expected a list of invariant names")
        chosen = dict.fromkeys(raw, True)
    elif isinstance(raw, dict):
        chosen = {}
        for key, value in raw.items():
            if not isinstance(value, bool):
                raise table.error("invariants", f"`{key}` must be true or false")
            chosen[key] = value
    else:
        raise table.error("invariants", "expected a list of names or a table of name = true/false")
    for name in chosen:
        if name not in INVARIANT_NAMES:
            import difflib

            close = difflib.get_close_matches(name, INVARIANT_NAMES, n=1)
            hint = f" (did you mean `{close[0]}`?)" if close else ""
            raise table.error(
                "invariants", f"unknown invariant {name!r}{hint}. Known: {', '.join(INVARIANT_NAMES)}."
            )
    return Invariants(**{k: v for k, v in chosen.items()})


def _is_callable_text(text: str) -> bool:
    return ":" in text and not text.endswith(".py") and "/" not in text.split(":")[0]


def _target(text: str, root: Path, table: TableReader, key: str, module_path: bool = False) -> str:
    """A callable "pkg.mod:func" stays as is; a script path must exist (relative to the config); with
    `module_path`, a dotted module path (upstream's `module = "my_project.ops.matmul"`) stays as is too."""
    if module_path and not text.endswith(".py") and text and all(DIM_NAME.match(p) for p in text.split(".")):
        return text
    if _is_callable_text(text):
        module, _, attribute = text.partition(":")
        if not module or not attribute or not all(DIM_NAME.match(p) for p in module.split(".")):
            raise table.error(key, f'{text!r} is not "package.module:function"')
        return text
    path = root / text
    if not path.is_file():
        raise table.error(
            key,
            f'file not found: {text} (relative to {root}); give a script path or "package.module:function"',
        )
    return text


OP_KEYS = (
    "name",
    "op",
    "reference",
    "execution_mode",
    "op_script",
    "family",
    "schema",
    "dims",
    "inputs",
    "output",
    "dtypes",
    "output_dtype",
    "framework",
    "kwargs",
    "tolerances",
    "invariants",
    "layouts",
    "distributions",
    "constraints",
    "nonfinite",
    "accumulator",
    "flush_to_zero",
    "transcendental_ulps",
    "deterministic",
    "out_arg",
    "timeout",
    "require_gpu",
    "error_scale",
    "naive",
    "naive_factor",
    "bound_c",
    "max_elements",
    "inputs_hook",
    "precision_reference",
    "backward",
    "vjp",
    "vjp_reference",
    "grad_inputs",
    "grad_accumulators",
    "triton",
    "intermediates",
)
TRITON_KEYS = ("sanitize", "undefined_masked_lanes")


def parse_op(
    table: TableReader, validation: Validation, project: Project, root: Path, ci: CiSettings | None = None
) -> OpSpec:
    """One `[[ops]]` table as an OpSpec, every key checked."""
    table.add_aliases(OP_ALIASES)
    table.expect_keys(OP_KEYS)
    name = table.string("name", required=True) or ""
    spec = _op_body(table, name, validation, project, root, ci or CiSettings(), need_target=True)
    table.finish()
    return spec


def parse_kernel_op(
    table: TableReader,
    name: str,
    validation: Validation,
    project: Project,
    root: Path,
    ci: CiSettings | None = None,
) -> OpSpec:
    """The validation part of a launchable [[kernels]] entry (its target is the kernel itself)."""
    table.add_aliases({"input_names": "inputs"})
    return _op_body(table, name, validation, project, root, ci or CiSettings(), need_target=False)


def _op_body(
    table: TableReader,
    name: str,
    validation: Validation,
    project: Project,
    root: Path,
    ci: CiSettings,
    need_target: bool,
) -> OpSpec:
    targets = _targets(table, name, project, root, need_target)
    shapes, inputs_hook = _shapes(table, name, ci, targets if need_target else None, root)
    family = table_choice(table, "family", table.string("family"), Family)
    error_scale = table.string("error_scale")
    if family is Family.CUSTOM and not error_scale and not targets.naive:
        raise table.error(
            "family",
            'family = "custom" needs `error_scale = "pkg.mod:func"` (returns the '
            "per-element error scale S and length n) or `naive` (baseline-relative rule)",
        )
    if inputs_hook is not None and not shapes.inputs and family in STRUCTURE_FAMILIES:
        raise table.error(
            "inputs_hook",
            f'family = "{family.value}" with an inputs hook and no [ops.inputs]: the error bound needs the inputs\' '
            "dims and roles (the length each output element sums, n, and its scale: |A||B|, the sum of |x|, P|V|, "
            "a row's statistics); without them it would judge blind. Declare [ops.inputs] next to the hook (the "
            "arrays it returns are checked against them) and `output` where the output drops dims, or use "
            'family = "custom" with `error_scale` or `naive`',
        )
    dtypes = _dtypes(table, validation)
    backward = _backward(table, name, targets, shapes, dtypes, root) if need_target else None
    output_dtype, output_dtypes = _output_dtypes(table)
    return OpSpec(
        name=name,
        backward=backward,
        dtypes=dtypes,
        output_dtype=output_dtype,
        output_dtypes=output_dtypes,
        targets=replace(targets, inputs_hook=inputs_hook, error_scale=error_scale),
        shapes=shapes,
        error_model=replace(
            _error_model(table, validation, family), intermediates=parse_intermediates(table, shapes)
        ),
        execution=_execution(table),
        line=table.line,
    )


# Families whose bound reads the op's structure from [ops.inputs] (config/ops.py, oracle/bounds.py).
STRUCTURE_FAMILIES = frozenset(
    {
        Family.MATMUL,
        Family.REDUCTION,
        Family.SCAN,
        Family.ATTENTION,
        Family.ARGMAX,
        Family.SOFTMAX,
        Family.NORM,
    }
)


def _execution_mode(table: TableReader) -> ExecutionMode:
    text = table.string("execution_mode")
    if text is None:
        return ExecutionMode.CALLABLE
    if text in EXECUTION_MODES:
        return EXECUTION_MODES[text]
    hint = (
        ' (upstream\'s schema page spells it "daemon_side", but its code reads "daemon_orchestrated")'
        if text == "daemon_side"
        else ""
    )
    expected = ", ".join(f'"{m}"' for m in EXECUTION_MODES)
    raise table.error("execution_mode", f"unknown value {text!r}{hint}; expected one of {expected}")


def _targets(table: TableReader, name: str, project: Project, root: Path, need_target: bool) -> OpTargets:
    """The op under test (or its script), the reference and the naive implementation."""
    mode = _execution_mode(table)
    target_text = table.string("op") if need_target else None
    op_script = table.string("op_script")
    if need_target:
        if op_script and mode is not ExecutionMode.SCRIPT:
            raise table.error("op_script", 'only used with execution_mode = "script_based"')
        if op_script and target_text:
            raise table.error("op_script", "the op is given twice (`module`/`op` and `op_script`); keep one")
        if not op_script and not target_text:
            raise ConfigError(
                f"op {name!r} names no op to run, so there is nothing to test (upstream compared the "
                "reference with itself, or with the op's first input, here). Add the op: "
                f'`module = "pkg.mod"` (its function named `{name}`, imported with the config\'s directory '
                'on sys.path), `module = "pkg.mod:function"`, or `op_script = "scripts/op.py"` with '
                'execution_mode = "script_based"',
                path=table.source.path,
                line=table.line,
            )
        if op_script:
            op_script = _target(op_script, root, table, "op_script")
        if target_text:
            target_text = _target(target_text, root, table, "op", module_path=True)
    reference = _target(table.string("reference", required=True) or "", root, table, "reference")
    if (
        mode is ExecutionMode.DAEMON
        and not _is_callable_text(reference)
        and not defines_function(root / reference, "reference")
    ):
        raise table.error(
            "execution_mode",
            f'"daemon_orchestrated" keeps the reference loaded between cases, but {reference} defines no '
            "`reference(inputs, **kwargs)` function to keep (it reads one case from stdin and exits). Define "
            'one, or use execution_mode = "script_based" (one process per case)',
        )
    return OpTargets(
        op=target_text or "",
        reference=reference,
        framework=table.choice("framework", Framework, project.framework, FRAMEWORK_SPELLINGS),
        execution_mode=mode,
        op_script=op_script,
        naive=table.string("naive"),
    )


def _backward(
    table: TableReader,
    name: str,
    targets: OpTargets,
    shapes: OpShapes,
    dtypes: tuple[str, ...],
    root: Path,
) -> Backward | None:
    """`backward = true` with its `vjp`, `vjp_reference` and `grad_inputs` (checked here, so that a run never
    starts on a backward it cannot compute)."""
    from gpuemu_ci import dtypes as dtype_table

    enabled = table.boolean("backward", False)
    vjp = table.string("vjp")
    vjp_reference = table.string("vjp_reference")
    grad_inputs = table.string_list("grad_inputs")
    accumulators = table.raw("grad_accumulators")
    if not enabled:
        for key, value in (
            ("vjp", vjp),
            ("vjp_reference", vjp_reference),
            ("grad_inputs", grad_inputs),
            ("grad_accumulators", accumulators),
        ):
            if value is not None:
                raise table.error(key, "only used with `backward = true`")
        return None
    if targets.op_script:
        raise table.error("backward", "not supported with `op_script` (autograd needs the op's own function)")
    if targets.framework is not Framework.TORCH and not vjp:
        raise table.error(
            "backward",
            f"op {name!r} is a {targets.framework.value} op: torch autograd cannot differentiate it; give "
            '`vjp = "pkg.mod:func"` (called with the inputs, `grad_output` and the kwargs; returns the '
            "gradients)",
        )
    vjp = _target(vjp, root, table, "vjp") if vjp else None
    vjp_reference = _target(vjp_reference, root, table, "vjp_reference") if vjp_reference else None
    for key, text in (("vjp", vjp), ("vjp_reference", vjp_reference)):
        if text is not None and ":" not in text:
            raise table.error(key, 'expected "pkg.mod:function"')
    float_case = any(dtype_table.info(d).is_float for d in dtypes)
    differentiable = [
        spec.name
        for spec in shapes.inputs
        if (dtype_table.info(spec.dtype).is_float if spec.dtype else float_case)
        and spec.kind not in (ValueKind.INDEX, ValueKind.SORTED_OFFSETS)
    ]
    if grad_inputs is None:
        grad_inputs = tuple(differentiable)
    for input_name in grad_inputs:
        if input_name not in differentiable:
            raise table.error(
                "grad_inputs",
                f"{input_name!r} is not a float input of the op; inputs that can have a gradient: "
                f"{', '.join(differentiable) or 'none'}",
            )
    if not grad_inputs:
        raise table.error("backward", "the op has no float input to differentiate (`grad_inputs`)")
    if table.has("out_arg"):
        raise table.error("backward", "not supported with `out_arg` (autograd needs the returned output)")
    declared = _grad_accumulators(table, accumulators, tuple(grad_inputs))
    return Backward(tuple(grad_inputs), vjp, vjp_reference, declared)


def _grad_accumulators(
    table: TableReader, value: object, grad_inputs: tuple[str, ...]
) -> tuple[tuple[str, str], ...]:
    """`grad_accumulators = { bias = "input", w = "float16" }`: per checked gradient, the dtype its sums are
    accumulated in (`"input"`: the input's own dtype), as canonical dtype names."""
    if value is None:
        return ()
    key = "grad_accumulators"
    if not isinstance(value, dict):
        raise table.error(key, 'expected a table of input name -> dtype, e.g. { bias = "input" }')
    declared = []
    for input_name, dtype in value.items():
        if input_name not in grad_inputs:
            raise table.error(
                key,
                f"{input_name!r} is not an input whose gradient is checked; those are: {', '.join(grad_inputs)}",
            )
        if not isinstance(dtype, str):
            raise table.error(key, f'{input_name}: expected a dtype name or "{INPUT_DTYPE}"')
        if dtype != INPUT_DTYPE:
            check_dtype(dtype, f"{table.where}.{key}.{input_name}", table.source, table.line_of(key))
            dtype = canonical_dtype(dtype)
        declared.append((str(input_name), dtype))
    return tuple(declared)


ALL_LAYOUTS = tuple(Layout)
ALL_DISTRIBUTIONS = tuple(Distribution)


def _shapes(
    table: TableReader,
    op_name: str,
    ci: CiSettings,
    targets: OpTargets | None = None,
    root: Path | None = None,
) -> tuple[OpShapes, str | None]:
    """Dims (own or from a builtin schema), inputs, the output's dims, kwargs and constraints, checked as one
    schema (config/dimgraph.py); and the inputs hook. An [[ops]] entry written as upstream writes it (no
    `inputs`, no `dims`, no `schema`) gets its input names from its code (config/infer_inputs.py)."""
    schema_name = table.string("schema")
    schema = None
    if schema_name is not None:
        if schema_name not in BUILTIN_SCHEMAS:
            raise table.error(
                "schema",
                f"unknown builtin schema {schema_name!r}; expected one of {', '.join(BUILTIN_SCHEMAS)}",
            )
        schema = BUILTIN_SCHEMAS[schema_name]
    inferred = None
    if schema is None and targets is not None and root is not None and not table.has("inputs"):
        if table.has("dims"):
            raise table.error("dims", 'declare the inputs that use these dims: [ops.inputs] x = ["M", "N"]')
        schema, inferred = infer_schema(table, op_name, targets, root)
    dims = dims_table(table, "dims")
    if schema is not None:
        for dim_name, sizes in schema[0].items():
            dims.setdefault(dim_name, DimSpec(dim_name, sizes, low=1, high=max(sizes)))
    inputs, hook = parse_inputs(table, dims, schema[1] if schema else None)
    own_hook = table.string("inputs_hook")
    if own_hook is not None:
        if hook is not None:
            raise table.error("inputs_hook", "the inputs hook is given twice (`inputs` is a hook already)")
        if ":" not in own_hook:
            raise table.error("inputs_hook", 'expected "pkg.mod:function"')
        hook = own_hook
    if not dims:
        dims = {n: DimSpec(n, s, low=1, high=max(s)) for n, s in DEFAULT_DIMS.items()}
    output_raw = table.raw("output")
    output_dims = (
        dim_list(table, "output", output_raw)
        if output_raw is not None
        else ((schema[2] or None) if schema else None)
    )
    _check_dims_declared(table, inputs, output_dims, dims)
    constraints = tuple(parse_constraint(table, text) for text in table.string_list("constraints", ()) or ())
    kwargs, bindings = kwargs_table(table, dims)
    layouts = table.string_list("layouts")
    distributions = table.string_list("distributions")
    shapes = OpShapes(
        inputs=inputs,
        dims=tuple(dims.values()),
        output_dims=output_dims,
        constraints=constraints,
        kwargs=kwargs,
        layouts=enum_list(table, "layouts", layouts, Layout) if layouts else ALL_LAYOUTS,
        distributions=enum_list(table, "distributions", distributions, Distribution)
        if distributions
        else ALL_DISTRIBUTIONS,
        kwarg_bindings=bindings,
        max_elements=table.integer("max_elements", ci.max_elements, minimum=1) or ci.max_elements,
        inferred=inferred,
    )
    graph = Schema(op_name, shapes, table.line, table.source.path)
    graph.validate()
    if graph.literal:  # the dims stay as declared
        return shapes, hook
    return replace(shapes, dims=graph.static_dims()), hook


BuiltinSchema = tuple[dict[str, tuple[int, ...]], dict[str, tuple[str, ...]], tuple[str, ...]]


def infer_schema(
    table: TableReader, op_name: str, targets: OpTargets, root: Path
) -> tuple[BuiltinSchema, str]:
    """A builtin schema for an op that lists no inputs: the one its name and input names fit (matmul's a, b;
    attention's q, k, v), else every input [B, S, H], the same shape (upstream's one shape for all inputs).
    Returns (schema, what was inferred in words, as TOML a user can paste to change it)."""
    found = infer_input_names(targets.op, targets.reference, targets.op_script, op_name, root)
    if found is None:
        raise table.error(
            "inputs",
            f"op {op_name!r} lists no inputs, and gpuemu-ci could not read their names from "
            f"{_described_targets(targets)} (it reads a function's required parameters, or the keys a "
            '`reference(inputs, **kwargs)` reads from `inputs`). Add them: inputs = ["x"] (every input '
            'of shape [B, S, H]), or [ops.inputs] a = ["M", "K"] with [ops.dims]',
        )
    names = found.names
    chosen: BuiltinSchema
    for schema_name, (dims, inputs, output) in BUILTIN_SCHEMAS.items():
        if set(inputs) == set(names) and (schema_name in op_name or len(names) > 1):
            chosen = (dims, {n: inputs[n] for n in names}, output)
            break
    else:
        # No output dims: the op may reduce or reshape; nothing about its output is assumed.
        chosen = (dict(DEFAULT_DIMS), dict.fromkeys(names, tuple(DEFAULT_DIMS)), ())
    dims, inputs, _ = chosen
    shown = ", ".join(f"{n} = [{', '.join(map(repr, d))}]".replace("'", '"') for n, d in inputs.items())
    sizes = ", ".join(f"{n} = {list(s)}" for n, s in dims.items())
    return chosen, f"[ops.inputs] {shown}; [ops.dims] {sizes} (names from {found.source})"


def _described_targets(targets: OpTargets) -> str:
    named = [t for t in (targets.op, targets.op_script, targets.reference) if t]
    return " or ".join(f"`{t}`" for t in named) or "its targets"


def _check_dims_declared(
    table: TableReader,
    inputs: tuple[InputSpec, ...],
    output_dims: tuple[str | int, ...] | None,
    dims: dict[str, DimSpec],
) -> None:
    for spec in inputs:
        for dim in (*spec.dims, *(output_dims or ())):
            if isinstance(dim, str) and dim not in dims:
                raise table.error(
                    "dims",
                    f"dim {dim!r} (used by `{spec.name}` or the output) is not declared "
                    f"in [ops.dims]; declared: {', '.join(dims) or 'none'}",
                )
        for bound in (spec.low, spec.high):
            if isinstance(bound, str):
                unknown = sorted(parse_expression(bound).names - set(dims))
                if unknown:
                    raise table.error(
                        "inputs",
                        f"`{spec.name}` is bounded by {bound!r}: {unknown[0]!r} is not a declared dim",
                    )


def _dtypes(table: TableReader, validation: Validation) -> tuple[str, ...]:
    dtype_list = table.string_list("dtypes")
    if dtype_list is not None:
        if not dtype_list:
            raise table.error("dtypes", "an empty list gives nothing to test")
        for dtype in dtype_list:
            check_dtype(dtype, f"{table.where}.dtypes", table.source, table.line_of("dtypes"))
    return tuple(canonical_dtype(d) for d in (dtype_list or validation.dtypes))


def _output_dtypes(table: TableReader) -> tuple[str | None, tuple[str, ...]]:
    """`output_dtype`: one dtype for every output, or a list with one per output (in the op's order)."""
    if not isinstance(table.raw("output_dtype"), list):
        return _optional_dtype(table, "output_dtype"), ()
    names = table.string_list("output_dtype") or ()
    if not names:
        raise table.error("output_dtype", "expected a dtype, or a non-empty list of dtypes (one per output)")
    line = table.line_of("output_dtype")
    for position, name in enumerate(names):
        check_dtype(name, f"{table.where}.output_dtype[{position}]", table.source, line)
    per_output = tuple(canonical_dtype(name) for name in names)
    return per_output[0], per_output


def _optional_dtype(table: TableReader, key: str) -> str | None:
    value = table.string(key)
    if value is None:
        return None
    check_dtype(value, f"{table.where}.{key}", table.source, table.line_of(key))
    return canonical_dtype(value)


def _error_model(table: TableReader, validation: Validation, family: Family | None) -> ErrorModel:
    own = tolerances(table.table("tolerances"))
    merged = dict(validation.tolerances)
    merged.update(dict(own))
    invariants = _invariants(table)
    if family is Family.ARGMAX and invariants.shape_preserved:
        raise table.error(
            "invariants",
            'family = "argmax" compares the op\'s indices with the scores the reference returns, whose shape has '
            "one more dim: `shape_preserved` (output shape = the reference's) could never hold",
        )
    return ErrorModel(
        family=family,
        # An op with a family is judged by the error bound unless it sets its own tolerances; an op without one
        # uses allclose with [validation.tolerances] (upstream semantics).
        tolerances=tuple(merged.items()) if family is None else tuple(own),
        invariants=invariants,
        nonfinite=table.choice("nonfinite", NonFinite, NonFinite.NONE),
        accumulator=_optional_dtype(table, "accumulator"),
        flush_to_zero=table.boolean("flush_to_zero", False),
        transcendental_ulps=table.number("transcendental_ulps", 4.0) or 0.0,
        bound_c=table.number("bound_c", 4.0, positive=True) or 4.0,
        naive_factor=table.number("naive_factor", 2.0, positive=True) or 2.0,
        precision_reference=table.boolean("precision_reference", True),
    )


def _execution(table: TableReader) -> Execution:
    sanitize, masked_lanes = _triton(table)
    return Execution(
        deterministic=table.boolean("deterministic", False),
        out_arg=table.string("out_arg"),
        timeout_s=table.number("timeout", None, positive=True),
        require_gpu=table.boolean("require_gpu", False),
        triton_sanitize=sanitize,
        triton_masked_lanes=masked_lanes,
    )


def _triton(table: TableReader) -> tuple[bool, MaskedLanes]:
    """`[ops.triton]`: `sanitize = false` turns the GPU-faithful layer off for the op (default on);
    `undefined_masked_lanes` says what outputs that depend on masked-off lanes of a load without `other` do."""
    triton = table.table("triton")
    if triton is None:
        return True, MaskedLanes.WARN
    triton.expect_keys(TRITON_KEYS)
    sanitize = triton.boolean("sanitize", True)
    given = triton.has("undefined_masked_lanes")
    masked_lanes = triton.choice("undefined_masked_lanes", MaskedLanes, MaskedLanes.WARN)
    if not sanitize and given:
        raise triton.error(
            "undefined_masked_lanes",
            "has no effect with sanitize = false (the plain interpreter neither checks nor poisons masked "
            "lanes): remove one of the two",
        )
    triton.finish()
    return sanitize, masked_lanes


def table_choice(table: TableReader, key: str, value: str | None, enum: type[E]) -> E | None:
    """`value` as a member of `enum` (None stays None); a config error naming the members otherwise."""
    if value is None:
        return None
    with contextlib.suppress(ValueError):  # a member's value: one lookup
        return enum(value)
    members = [m.value for m in enum]
    if value not in members:
        import difflib

        close = difflib.get_close_matches(value, members, n=1)
        hint = f" (did you mean `{close[0]}`?)" if close else ""
        raise table.error(key, f"unknown value {value!r}{hint}; expected one of {', '.join(members)}")
    return enum(value)
