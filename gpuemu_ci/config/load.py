"""gpuemu.toml -> Config: discovery, user defaults, strict parsing of every section.

Compatible with upstream gpuemu's documented format (both tolerance forms, both invariant forms, the documented
aliases) and strict where upstream is silent: unknown keys, wrong types and impossible values are ConfigErrors
(exit 2) naming the file, line and closest valid key.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import gc
import hashlib
import os
import re
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from gpuemu_ci.config import ops as ops_parser
from gpuemu_ci.config.expressions import ExpressionError, parse_expression
from gpuemu_ci.config.kernel_layouts import fit_layouts, flushes_subnormals
from gpuemu_ci.config.model import (
    FRAMEWORK_SPELLINGS,
    PATTERN_TARGETS,
    ArtifactChecks,
    CiSettings,
    Config,
    Framework,
    KernelDeltaOverride,
    KernelLanguage,
    KernelLaunch,
    KernelSpec,
    OpSpec,
    Policies,
    Project,
    Validation,
)
from gpuemu_ci.config.nesting import deepest
from gpuemu_ci.config.ops import table_choice
from gpuemu_ci.config.patterns import INSTRUCTION_ALIASES, parse_patterns
from gpuemu_ci.config.reader import SourceText, TableReader
from gpuemu_ci.config.schema import canonical_dtype, check_dtype
from gpuemu_ci.errors import ConfigError

CONFIG_NAME = "gpuemu.toml"
_AMD_ARCH = re.compile(
    r"^gfx[0-9]+[0-9a-f]*(?::(?:sramecc|xnack)[+-])*$"
)  # a target ID: processor[:feature±]
USER_CONFIG_ENV = "GPUEMU_USER_CONFIG"  # a path, or "none" to ignore user defaults (and the daemon file)
DAEMON_CONFIG_ENV = "GPUEMU_DAEMON_CONFIG"  # a path, or "none": upstream's ~/.gpuemu/daemon.toml
USER_SECTIONS = ("project", "validation", "ci", "policies")


def find_config(cwd: Path | None = None) -> Path:
    """`gpuemu.toml` in `cwd` or the nearest parent directory."""
    start = (cwd or Path.cwd()).resolve()
    for directory in (start, *start.parents):
        candidate = directory / CONFIG_NAME
        if candidate.is_file():
            return candidate
    raise ConfigError(
        f"no {CONFIG_NAME} found in {start} or any parent directory. Create one (`gpuemu-ci init` writes a "
        "starter) or pass --config PATH."
    )


def user_config_path(env: Mapping[str, str] | None = None) -> Path | None:
    """The user's own settings file (the environment variable names it, "none" turns it off), else None."""
    env = os.environ if env is None else env
    explicit = env.get(USER_CONFIG_ENV)
    if explicit:
        return None if explicit.lower() == "none" else Path(explicit)
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpuemu" / "config.toml"


def daemon_config_path(env: Mapping[str, str] | None = None) -> Path | None:
    """Upstream's daemon file, the lowest layer of defaults; GPUEMU_USER_CONFIG=none turns it off too."""
    env = os.environ if env is None else env
    explicit = env.get(DAEMON_CONFIG_ENV)
    if explicit:
        return None if explicit.lower() == "none" else Path(explicit)
    if env.get(USER_CONFIG_ENV, "").lower() == "none":
        return None
    return Path.home() / ".gpuemu" / "daemon.toml"


def load_config(
    path: Path | None = None, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> Config:
    """Loads and validates a config; raises ConfigError with file and line on any problem."""
    config_path = Path(path) if path is not None else find_config(cwd)
    if not config_path.is_file():
        raise ConfigError(f"config file not found: {config_path}")
    raw_bytes = config_path.read_bytes()
    with _no_cycle_collection():
        data, source = _parse_toml(raw_bytes, str(config_path))
        # Upstream's precedence: the project's file over the user's defaults over the daemon's file; a table
        # merges key by key, arrays of tables ([[ops]], [[kernels]]) only ever come from the project.
        notes: list[str] = []
        defaults: dict[str, Any] = {}
        for layer_path, daemon in ((daemon_config_path(env), True), (user_config_path(env), False)):
            if layer_path is None or not layer_path.is_file():
                continue
            layer, layer_source = _parse_toml(layer_path.read_bytes(), str(layer_path))
            notes += _check_user_sections(layer, layer_source, daemon)
            defaults = _merge_defaults(defaults, {k: v for k, v in layer.items() if k in USER_SECTIONS})
        if defaults:
            data = _merge_defaults(defaults, data)
        config = build_config(data, source, config_path.resolve(), hashlib.sha256(raw_bytes).hexdigest())
        return dataclasses.replace(config, notes=(*notes, *config.notes)) if notes else config


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Parsing builds many small objects that live until the Config is built and form no reference cycles;
    the cyclic collector would scan them again and again (a fifth of the load time of a config of many ops)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _parse_toml(raw: bytes, path: str) -> tuple[dict[str, Any], SourceText]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", path=path) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib puts "(at line N, column M)" in the message; `lineno` exists only on newer Pythons.
        found = re.search(r"at line (\d+)", str(exc))
        line = getattr(exc, "lineno", None) or (int(found.group(1)) if found else None)
        raise ConfigError(f"TOML syntax error: {exc}", path=path, line=line) from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        nesting = deepest(text)
        raise ConfigError(
            f"a value nests arrays or inline tables {nesting.depth:,} deep, too deep to read "
            "(gpuemu.toml needs a few levels at most)",
            path=path,
            line=nesting.line,
        ) from None
    return data, SourceText(path, tuple(text.splitlines()))


def _check_user_sections(data: Mapping[str, Any], source: SourceText, daemon: bool) -> list[str]:
    """Refuses what a defaults file cannot hold; returns notes on the daemon file's own tables (not read)."""
    notes = []
    for key, value in data.items():
        if key in USER_SECTIONS:
            continue
        if key in ("ops", "kernels"):
            raise ConfigError(
                f"[[{key}]] in a defaults file: the ops and kernels a gate checks live in the repository's "
                "gpuemu.toml, so that CI runs the same suite as your machine; move them there",
                path=source.path,
                line=next(iter(source.header_lines(key)), None),
            )
        if daemon and isinstance(value, Mapping):  # the upstream daemon's own settings (socket, storage, ...)
            notes.append(
                f"{source.path}: [{key}] configures upstream's daemon; gpuemu-ci runs no daemon and does not "
                "read it (only [project], [validation], [ci] and [policies] are used as defaults)"
            )
            continue
        raise ConfigError(
            f"a defaults file may only hold {', '.join(f'[{s}]' for s in USER_SECTIONS)}; found `{key}`",
            path=source.path,
            line=source.key_line(key, None),
        )
    return notes


def _merge_defaults(defaults: Mapping[str, Any], project: Mapping[str, Any]) -> dict[str, Any]:
    """Project values win; tables merge key by key."""
    merged: dict[str, Any] = dict(defaults)
    for key, value in project.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge_defaults(merged[key], value)
        else:
            merged[key] = value
    return merged


def build_config(data: Mapping[str, Any], source: SourceText, path: Path, sha256: str) -> Config:
    """The Config of a parsed gpuemu.toml (`data`), every key checked; ConfigError names the first problem."""
    top = TableReader(data, "gpuemu.toml", source)
    root = path.parent
    project = _project(top.table("project"))
    validation = _validation(top.table("validation"), source)
    ci = _ci(top.table("ci"))
    policies = _policies(top.table("policies"))

    ops_raw = top.raw("ops", [])
    kernels_raw = top.raw("kernels", [])
    top.finish()
    if not isinstance(ops_raw, list):
        raise ConfigError("`ops` must be an array of tables ([[ops]])", path=source.path)
    if not isinstance(kernels_raw, list):
        raise ConfigError("`kernels` must be an array of tables ([[kernels]])", path=source.path)
    if not ops_raw and not kernels_raw:
        raise ConfigError(
            "declares no [[ops]] or [[kernels]]: there is nothing to test (see `gpuemu-ci init` for a starter)",
            path=source.path,
        )

    op_lines = _table_spans(source, "ops", len(ops_raw))
    ops = tuple(
        ops_parser.parse_op(TableReader(raw, f"ops[{i}]", source, start, end), validation, project, root, ci)
        for i, (raw, (start, end)) in enumerate(zip(ops_raw, op_lines, strict=True))
    )
    _unique([op.name for op in ops], "ops", source, op_lines)

    kernel_lines = _table_spans(source, "kernels", len(kernels_raw))
    kernels = tuple(
        _kernel(TableReader(raw, f"kernels[{i}]", source, start, end), validation, project, root, ci)
        for i, (raw, (start, end)) in enumerate(zip(kernels_raw, kernel_lines, strict=True))
    )
    _unique([k.name for k in kernels], "kernels", source, kernel_lines)
    op_names = {op.name for op in ops}
    for kernel in kernels:
        if kernel.launch is not None and kernel.name in op_names:
            raise ConfigError(
                f"[[kernels]] {kernel.name!r} has a launch table and is validated like an op, so its "
                "name must differ from every [[ops]] name",
                path=source.path,
                line=kernel.line,
            )
    for dtype in ci.quick_dtypes or ():
        check_dtype(dtype, "ci.quick_dtypes", source)
    notes = tuple(
        f"op {op.name!r} lists no inputs; it runs with {op.shapes.inferred}. Write these keys to change them."
        for op in ops
        if op.shapes.inferred
    )
    return Config(path, root, sha256, project, validation, ops, kernels, policies, ci, notes)


def _table_spans(source: SourceText, name: str, count: int) -> list[tuple[int | None, int | None]]:
    """(header line, end line) for each [[name]] table; sub-tables like [name.dims] stay inside."""
    starts = source.header_lines(name)
    all_headers = [number for number, text in source.headers if not text.startswith(f"[{name}.")]
    spans: list[tuple[int | None, int | None]] = []
    for index in range(count):
        if index >= len(starts):  # inline array of tables: no header lines to point at
            spans.append((None, None))
            continue
        start = starts[index]
        later = bisect.bisect_right(all_headers, start)  # headers are in file order: linear in the file
        spans.append((start, all_headers[later] if later < len(all_headers) else None))
    return spans


def _unique(
    names: list[str], section: str, source: SourceText, lines: list[tuple[int | None, int | None]]
) -> None:
    seen: set[str] = set()
    for name, (line, _) in zip(names, lines, strict=True):
        if name in seen:
            raise ConfigError(
                f"two [[{section}]] entries are named {name!r}; names must be unique",
                path=source.path,
                line=line,
            )
        seen.add(name)


def _project(table: TableReader | None) -> Project:
    if table is None:
        return Project()
    project = Project(
        name=table.string("name", "unnamed") or "unnamed",
        version=table.string("version"),
        framework=table.choice("framework", Framework, Framework.NUMPY, FRAMEWORK_SPELLINGS),
    )
    table.finish()
    return project


def _validation(table: TableReader | None, source: SourceText) -> Validation:
    if table is None:
        return Validation()
    dtypes = table.string_list("dtypes", ("float32",)) or ("float32",)
    for dtype in dtypes:
        check_dtype(dtype, "validation.dtypes", source, table.line_of("dtypes"))
    seed = table.integer("seed", None, minimum=0)
    if seed is not None and seed >= 2**64:
        raise table.error("seed", "must fit in 64 bits")
    validation = Validation(
        dtypes=tuple(canonical_dtype(d) for d in dtypes),
        seed=seed,
        check_nan=table.boolean("check_nan", Validation.check_nan),
        check_inf=table.boolean("check_inf", Validation.check_inf),
        tolerances=ops_parser.tolerances(table.table("tolerances")),
        bias_z_threshold=table.number("bias_z_threshold", 6.0, positive=True) or 6.0,
    )
    table.finish()
    return validation


def _ci(table: TableReader | None) -> CiSettings:
    if table is None:
        return CiSettings()
    defaults = CiSettings()
    ci = CiSettings(
        quick_dtypes=_quick_dtypes(table),
        quick_iterations=table.integer("quick_iterations", defaults.quick_iterations, minimum=1)
        or defaults.quick_iterations,
        quick_extra_dtype_iterations=table.integer(
            "quick_extra_dtype_iterations", defaults.quick_extra_dtype_iterations, minimum=1
        )
        or defaults.quick_extra_dtype_iterations,
        thorough_iterations=table.integer("thorough_iterations", defaults.thorough_iterations, minimum=1)
        or defaults.thorough_iterations,
        thorough_timeout=table.number("thorough_timeout", defaults.thorough_timeout, positive=True)
        or defaults.thorough_timeout,
        case_timeout=table.number("case_timeout", defaults.case_timeout, positive=True)
        or defaults.case_timeout,
        parallel_jobs=table.integer("parallel_jobs", defaults.parallel_jobs, minimum=1),
        lint=table.boolean("lint", defaults.lint),
        require_gpu=table.boolean("require_gpu", defaults.require_gpu),
        corpus=_corpus_dir(table),
        max_elements=table.integer("max_elements", defaults.max_elements, minimum=1) or defaults.max_elements,
        allow_skips=table.boolean("allow_skips", defaults.allow_skips),
        allow_unchecked=table.boolean("allow_unchecked", defaults.allow_unchecked),
    )
    table.finish()
    return ci


def _corpus_dir(table: TableReader) -> str | None:
    """`corpus = "gpuemu-corpus"`: a directory next to gpuemu.toml (inside the repository, never outside)."""
    text = table.string("corpus")
    if text is None:
        return None
    path = Path(text)
    if not text or path.is_absolute() or ".." in path.parts:
        raise table.error(
            "corpus", f"{text!r}: give a directory relative to gpuemu.toml, inside the repository"
        )
    return text


def _quick_dtypes(table: TableReader) -> tuple[str, ...] | None:
    """None (every dtype of each op) unless the config narrows the quick suite."""
    listed = table.string_list("quick_dtypes")
    if listed is None:
        return None
    if not listed:
        raise table.error("quick_dtypes", "an empty list runs nothing; leave it out to run every dtype")
    return tuple(canonical_dtype(d) for d in listed)


def _policies(table: TableReader | None) -> Policies:
    if table is None:
        return Policies()
    d = Policies()
    policies = Policies(
        fail_on_regression=table.boolean("fail_on_regression", d.fail_on_regression),
        warn_threshold=_share(table, "warn_threshold", d.warn_threshold),
        headroom_growth_threshold=table.number(
            "headroom_growth_threshold", d.headroom_growth_threshold, positive=True
        )
        or d.headroom_growth_threshold,
        max_register_increase=table.integer("max_register_increase", d.max_register_increase, minimum=0) or 0,
        max_spill_increase=table.integer("max_spill_increase", d.max_spill_increase, minimum=0) or 0,
        max_local_memory_increase=table.integer(
            "max_local_memory_increase", d.max_local_memory_increase, minimum=0
        )
        or 0,
        max_shared_memory_increase=table.integer(
            "max_shared_memory_increase", d.max_shared_memory_increase, minimum=0
        )
        or 0,
        max_instruction_increase_pct=table.number(
            "max_instruction_increase_pct", d.max_instruction_increase_pct
        )
        or 0.0,
        kernel_overrides=_kernel_overrides(table.table("kernels")),
    )
    table.finish()
    return policies


def _share(table: TableReader, key: str, default: float) -> float:
    """A share of an allowance, in (0, 1]: above 1 it would wait for cases that already fail (checks nothing)."""
    value = table.number(key, default, positive=True) or default
    if value > 1.0:
        raise table.error(
            key,
            f"{value:g} is a share of the allowance, at most 1 (0.8: warn at 80%); a passing case never uses "
            "more than all of it, so the warning could never fire",
        )
    return value


def _kernel_overrides(table: TableReader | None) -> tuple[tuple[str, KernelDeltaOverride], ...]:
    """[policies.kernels."gelu"] max_register_increase = 8 ...: a [[kernels]] name or an entry name."""
    if table is None:
        return ()
    overrides = []
    for name in list(table._data):
        sub = table.table(name)
        assert sub is not None
        overrides.append(
            (
                name,
                KernelDeltaOverride(
                    max_register_increase=sub.integer("max_register_increase", None, minimum=0),
                    max_spill_increase=sub.integer("max_spill_increase", None, minimum=0),
                    max_local_memory_increase=sub.integer("max_local_memory_increase", None, minimum=0),
                    max_shared_memory_increase=sub.integer("max_shared_memory_increase", None, minimum=0),
                    max_instruction_increase_pct=sub.number("max_instruction_increase_pct", None),
                ),
            )
        )
        sub.finish()
    table.finish()
    return tuple(overrides)


KERNEL_VALIDATION_KEYS = (
    "reference",
    "inputs",
    "input_names",
    "dims",
    "dtypes",
    "family",
    "tolerances",
    "invariants",
    "kwargs",
    "constraints",
    "output",
    "layouts",
    "distributions",
    "accumulator",
    "nonfinite",
    "deterministic",
    "timeout",
    "max_elements",
    "precision_reference",
)


def _kernel(
    table: TableReader, validation: Validation, project: Project, root: Path, ci: CiSettings
) -> KernelSpec:
    name = table.string("name", required=True) or ""
    source_text = table.string("source", required=True) or ""
    source = (root / source_text).resolve()
    if not source.is_file():
        raise table.error("source", f"file not found: {source_text} (relative to {root})")
    language = _language(table, source)
    archs = table.string_list("archs", ()) or ()
    for arch in archs:
        _check_arch(table, arch, language)
    include_dirs = tuple((root / d).resolve() for d in table.string_list("include_dirs", ()) or ())
    checks = _artifact_checks(
        table.table(
            "artifact_checks",
            aliases={
                "max_local_memory_bytes": "max_local_memory",
                "max_shared_memory_bytes": "max_shared_memory",
                "max_regs": "max_registers",
                **INSTRUCTION_ALIASES,
            },
        ),
        language,
    )
    flags = table.string_list("flags", ()) or ()
    launch_table = table.table("launch")
    launch = _launch(launch_table) if launch_table is not None else None
    op = None
    if launch is not None:
        assert launch_table is not None  # the launch was read from it
        op = ops_parser.parse_kernel_op(table, name, validation, project, root, ci)
        if launch.output_dtype and op.output_dtype and launch.output_dtype != op.output_dtype:
            raise launch_table.error(
                "output_dtype",
                f"says {launch.output_dtype!r} but the kernel's `output_dtype` says {op.output_dtype!r}; "
                "give it once",
            )
        _check_launch_names(launch, op, launch_table)
        if launch.output_dtype:  # the oracle judges the output in the dtype the kernel writes
            op = dataclasses.replace(op, output_dtype=launch.output_dtype)
        # A bare pointer carries no strides: each input is drawn only in layouts its launch args can describe.
        op, problems = fit_layouts(op, launch.args, op_layouts_explicit=table.has("layouts"))
        if problems:
            raise table.error("layouts" if table.has("layouts") else "inputs", problems[0])
        # A CuPy launch on an NVIDIA GPU; a HIP kernel's needs an AMD GPU.
        execution = dataclasses.replace(
            op.execution, require_gpu=True, amd_gpu=language is KernelLanguage.HIP
        )
        op = dataclasses.replace(op, execution=execution)
        if flushes_subnormals(flags):  # the launch is built with these flags
            op = dataclasses.replace(op, error_model=dataclasses.replace(op.error_model, flush_to_zero=True))
    elif any(table.has(k) for k in KERNEL_VALIDATION_KEYS if k != "reference"):
        key = next(k for k in KERNEL_VALIDATION_KEYS if k != "reference" and table.has(k))
        raise table.error(
            key,
            "numerical validation of a kernel needs a [kernels.launch] table "
            "(kernel entry, grid, block, args); without it the kernel is only linted",
        )
    else:
        table.string("reference")  # upstream requires it; without a launch it has nothing to validate
    kernel = KernelSpec(
        name=name,
        source=source,
        archs=archs,
        flags=flags,
        include_dirs=include_dirs,
        defines=table.string_list("defines", ()) or (),
        entries=table.string_list("entries", ()) or (),
        artifact_checks=checks,
        launch=launch,
        op=op,
        line=table.line,
        language=language,
    )
    table.finish()
    return kernel


def _language(table: TableReader, source: Path) -> KernelLanguage:
    """`language`, else HIP for a .hip source and CUDA for the rest; a .ptx is CUDA's only."""
    implied = KernelLanguage.HIP if source.suffix.lower() == ".hip" else KernelLanguage.CUDA
    language = table_choice(table, "language", table.string("language"), KernelLanguage) or implied
    if language is KernelLanguage.HIP and source.suffix.lower() == ".ptx":
        raise table.error(
            "language", f'{source.name} is PTX, which only CUDA kernels have; drop language = "hip"'
        )
    return language


def _check_arch(table: TableReader, arch: str, language: KernelLanguage) -> None:
    if language is KernelLanguage.HIP:
        if not _AMD_ARCH.match(arch):
            raise table.error(
                "archs",
                f'{arch!r} is not an AMD GPU arch like "gfx90a", "gfx1030" or "gfx90a:xnack+" (a HIP kernel)',
            )
    elif not arch.startswith(("sm_", "compute_")) or not arch.split("_", 1)[1].rstrip("af").isdigit():
        hint = (
            ' (an AMD GPU arch: a HIP kernel is a .hip source, or says language = "hip")'
            if _AMD_ARCH.match(arch)
            else ""
        )
        raise table.error("archs", f'{arch!r} is not an arch like "sm_80" or "sm_90a"{hint}')


def _artifact_checks(table: TableReader | None, language: KernelLanguage) -> ArtifactChecks:
    if table is None:
        return ArtifactChecks()
    targets = PATTERN_TARGETS[language]
    checks = ArtifactChecks(
        max_registers=table.integer("max_registers", None, minimum=0),
        max_spills=table.integer("max_spills", None, minimum=0),
        max_spill_stores=table.integer("max_spill_stores", None, minimum=0),
        max_spill_loads=table.integer("max_spill_loads", None, minimum=0),
        max_local_memory=table.integer("max_local_memory", None, minimum=0),
        max_shared_memory=table.integer("max_shared_memory", None, minimum=0),
        required_patterns=parse_patterns(table, "required_patterns", targets),
        forbidden_patterns=parse_patterns(table, "forbidden_patterns", targets),
    )
    table.finish()
    return checks


def _check_launch_names(launch: KernelLaunch, op: OpSpec, table: TableReader) -> None:
    """Every name a launch reads is one the case defines (a dim, a kwarg, an input, `out`), checked now: on a
    machine without a GPU the launch never runs, and a misspelt name would otherwise wait for one."""
    dims = {d.name for d in op.shapes.dims}
    allowed = dims | {name for name, _ in op.shapes.kwargs} | {name for name, _ in op.shapes.kwarg_bindings}
    allowed |= {spec.name for spec in op.shapes.inputs} | {"out"}
    for key, texts in (
        ("grid", launch.grid),
        ("block", launch.block),
        ("args", launch.args),
        ("shared_mem", (launch.shared_mem,)),
    ):
        for text in texts:
            try:
                parse_expression(text, allowed)
            except ExpressionError as exc:
                raise table.error(
                    key, f"{exc}; it may read the dims, kwargs and inputs of the kernel"
                ) from None
    for dim in launch.output_dims:
        if isinstance(dim, str) and dim not in dims:
            raise table.error(
                "output", f"{dim!r} is not a dim of the kernel (declared: {', '.join(sorted(dims))})"
            )


def _launch(table: TableReader) -> KernelLaunch:
    def exprs(key: str, required: bool) -> tuple[str, ...]:
        raw = table.raw(key)
        if raw is None:
            if required:
                raise table.error(key, "is required")
            return ()
        if not isinstance(raw, list) or not raw or not all(isinstance(v, (str, int)) for v in raw):
            raise table.error(key, "expected a non-empty list of integers or expressions")
        return tuple(str(v) for v in raw)

    entry = table.string("kernel", required=True) or ""
    output = table.raw("output")
    if not isinstance(output, list) or not all(isinstance(v, (str, int)) for v in output):
        raise table.error("output", 'expected the output\'s dims, e.g. ["M", "N"]')
    output_dtype = table.string("output_dtype")
    if output_dtype is not None:
        check_dtype(output_dtype, f"{table.where}.output_dtype", table.source, table.line_of("output_dtype"))
        output_dtype = canonical_dtype(output_dtype)
    launch = KernelLaunch(
        entry=entry,
        grid=exprs("grid", True),
        block=exprs("block", True),
        args=exprs("args", True),
        output_dims=tuple(output),
        output_dtype=output_dtype,
        shared_mem=str(table.raw("shared_mem", "0")),
    )
    table.finish()
    return launch
