"""Parsing of [[ops]] tables (and the op part of a launchable [[kernels]] entry) into OpSpec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuemu_ci.config.model import (
    INVARIANT_NAMES,
    DimConstraint,
    DimSpec,
    Distribution,
    ExecutionMode,
    Family,
    Framework,
    Invariants,
    Layout,
    NonFinite,
    OpSpec,
    Project,
    Tolerance,
    Validation,
)
from gpuemu_ci.config.reader import TableReader
from gpuemu_ci.config.schema import (
    BUILTIN_SCHEMAS,
    DEFAULT_DIMS,
    DIM_NAME,
    canonical_dtype,
    check_constraint,
    check_dtype,
    dim_list,
    dims_table,
    enum_list,
    kwargs_table,
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


def _target(text: str, root: Path, table: TableReader, key: str) -> str:
    """A callable "pkg.mod:func" stays as is; a script path must exist (relative to the config)."""
    if ":" in text and not text.endswith(".py") and "/" not in text.split(":")[0]:
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
)


def parse_op(table: TableReader, validation: Validation, project: Project, root: Path) -> OpSpec:
    table.aliases.update(OP_ALIASES)
    table.expect_keys(OP_KEYS)
    name = table.string("name", required=True) or ""
    spec = _op_body(table, name, validation, project, root, need_target=True)
    table.finish()
    return spec


def parse_kernel_op(
    table: TableReader, name: str, validation: Validation, project: Project, root: Path
) -> OpSpec:
    """The validation part of a launchable [[kernels]] entry (its target is the kernel itself)."""
    table.aliases.update({"input_names": "inputs"})
    return _op_body(table, name, validation, project, root, need_target=False)


def _op_body(
    table: TableReader, name: str, validation: Validation, project: Project, root: Path, need_target: bool
) -> OpSpec:
    mode_raw = table.string("execution_mode")
    if mode_raw in ("client_side", "daemon_orchestrated", None):
        mode = ExecutionMode.CALLABLE
    elif mode_raw == ExecutionMode.SCRIPT.value:
        mode = ExecutionMode.SCRIPT
    else:
        raise table.error(
            "execution_mode",
            f'unknown value {mode_raw!r}; expected "script_based", "client_side" or "daemon_orchestrated"',
        )
    target_text = table.string("op") if need_target else None
    op_script = table.string("op_script")
    if need_target:
        if mode is ExecutionMode.SCRIPT:
            if not op_script:
                raise table.error(
                    "op_script",
                    'execution_mode = "script_based" needs `op_script`, the script '
                    "that computes the op's output (without it nothing is tested)",
                )
            op_script = _target(op_script, root, table, "op_script")
        elif not target_text:
            raise ConfigError(
                f'op {name!r} has no `op` to test. Give `op = "package.module:function"`, or '
                '`execution_mode = "script_based"` with `op_script`. (Upstream\'s client_side and '
                "daemon_orchestrated modes compared the reference with itself; gpuemu-ci refuses to gate on that.)",
                path=table.source.path,
                line=table.line,
            )
        elif op_script:
            raise table.error("op_script", 'only used with execution_mode = "script_based"')
        if target_text:
            target_text = _target(target_text, root, table, "op")
    reference = _target(table.string("reference", required=True) or "", root, table, "reference")

    family_raw = table.string("family")
    family = table_choice(table, "family", family_raw, Family)
    schema_name = table.string("schema")
    schema = None
    if schema_name is not None:
        if schema_name not in BUILTIN_SCHEMAS:
            raise table.error(
                "schema",
                f"unknown builtin schema {schema_name!r}; expected one of {', '.join(BUILTIN_SCHEMAS)}",
            )
        schema = BUILTIN_SCHEMAS[schema_name]
    dims = dims_table(table, "dims")
    if schema is not None:
        for dim_name, sizes in schema[0].items():
            dims.setdefault(dim_name, DimSpec(dim_name, sizes, low=1, high=max(sizes)))
    inputs, hook = parse_inputs(table, dims, schema[1] if schema else None)
    if not dims:
        dims = {n: DimSpec(n, s, low=1, high=max(s)) for n, s in DEFAULT_DIMS.items()}
    output_raw = table.raw("output")
    output_dims = (
        dim_list(table, "output", output_raw) if output_raw is not None else (schema[2] if schema else None)
    )
    for spec in inputs:
        for dim in (*spec.dims, *(output_dims or ())):
            if isinstance(dim, str) and dim not in dims:
                raise table.error(
                    "dims",
                    f"dim {dim!r} (used by `{spec.name}` or the output) is not declared "
                    f"in [ops.dims]; declared: {', '.join(dims) or 'none'}",
                )
        for bound in (spec.low, spec.high):
            if isinstance(bound, str) and bound not in dims:
                raise table.error(
                    "inputs", f"`{spec.name}` is bounded by dim {bound!r}, which is not declared"
                )

    dtype_list = table.string_list("dtypes")
    if dtype_list is not None:
        if not dtype_list:
            raise table.error("dtypes", "an empty list gives nothing to test")
        for dtype in dtype_list:
            check_dtype(dtype, f"{table.where}.dtypes", table.source, table.line_of("dtypes"))
    op_dtypes = tuple(canonical_dtype(d) for d in (dtype_list or validation.dtypes))
    output_dtype = table.string("output_dtype")
    if output_dtype is not None:
        check_dtype(output_dtype, f"{table.where}.output_dtype", table.source, table.line_of("output_dtype"))
        output_dtype = canonical_dtype(output_dtype)
    layouts = table.string_list("layouts")
    distributions = table.string_list("distributions")
    constraints = table.string_list("constraints", ()) or ()
    for text in constraints:
        check_constraint(table, text, dims)
    timeout = table.number("timeout", None, positive=True)
    tolerances_own = tolerances(table.table("tolerances"))
    op_tolerances = dict(validation.tolerances)
    op_tolerances.update(dict(tolerances_own))
    accumulator = table.string("accumulator")
    if accumulator is not None:
        check_dtype(accumulator, f"{table.where}.accumulator", table.source, table.line_of("accumulator"))
    bound_hook = table.string("error_scale")
    if family is Family.CUSTOM and not bound_hook and not table.has("naive"):
        raise table.error(
            "family",
            'family = "custom" needs `error_scale = "pkg.mod:func"` (returns the '
            "per-element error scale S and length n) or `naive` (baseline-relative rule)",
        )
    return OpSpec(
        name=name,
        target=target_text or "",
        reference=reference,
        family=family,
        inputs=inputs,
        dims=tuple(dims.values()),
        output_dims=output_dims,
        dtypes=op_dtypes,
        output_dtype=output_dtype,
        framework=table.choice("framework", Framework, project.framework),
        execution_mode=mode,
        op_script=op_script,
        kwargs=kwargs_table(table),
        # An op with a family is judged by the error bound unless it sets its own tolerances; an op without one
        # uses allclose with [validation.tolerances] (upstream semantics).
        tolerances=tuple(op_tolerances.items()) if family is None else tuple(tolerances_own),
        invariants=_invariants(table),
        layouts=enum_list(table, "layouts", layouts, Layout) if layouts else tuple(Layout),
        distributions=enum_list(table, "distributions", distributions, Distribution)
        if distributions
        else tuple(Distribution),
        constraints=tuple(DimConstraint(c) for c in constraints),
        nonfinite=table.choice("nonfinite", NonFinite, NonFinite.NONE),
        accumulator=canonical_dtype(accumulator) if accumulator else None,
        flush_to_zero=table.boolean("flush_to_zero", False),
        transcendental_ulps=table.number("transcendental_ulps", 4.0) or 0.0,
        deterministic=table.boolean("deterministic", False),
        out_arg=table.string("out_arg"),
        timeout_s=timeout,
        require_gpu=table.boolean("require_gpu", False),
        inputs_hook=hook,
        bound_hook=bound_hook,
        naive=table.string("naive"),
        naive_factor=table.number("naive_factor", 2.0, positive=True) or 2.0,
        bound_c=table.number("bound_c", 4.0, positive=True) or 4.0,
        line=table.line,
    )


def table_choice(table: TableReader, key: str, value: str | None, enum: type) -> Any:
    if value is None:
        return None
    members = [m.value for m in enum]
    if value not in members:
        import difflib

        close = difflib.get_close_matches(value, members, n=1)
        hint = f" (did you mean `{close[0]}`?)" if close else ""
        raise table.error(key, f"unknown value {value!r}{hint}; expected one of {', '.join(members)}")
    return enum(value)
