"""What a run was asked for (`RunOptions`, from the command line or the Action's inputs) and what that resolves
to against the config (`Settings`): the master seed, cases per op and dtype, jobs, timeouts. Resolved once,
here, for every command that runs ops."""

from __future__ import annotations

import difflib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuemu_ci.config.model import Config, OpSpec, Suite
from gpuemu_ci.errors import ConfigError
from gpuemu_ci.launch import available_cores
from gpuemu_ci.pipeline.shard import Shard
from gpuemu_ci.plan.expand import suite_dtypes
from gpuemu_ci.results.model import RunInfo

DEFAULT_SEED = 0  # a fixed master seed: the same config replays the same suite unless a seed is given
RANDOM_SEED = 0  # `validation.seed = 0` written in the config: a fresh seed per run, as upstream documents it


@dataclass(frozen=True)
class RunOptions:
    """What the caller asked for; None means "the config's setting"."""

    suite: Suite = Suite.QUICK
    seed: int | None = None
    ops: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()
    iterations: int | None = None
    out_dir: Path = Path("gpuemu-out")
    jobs: int | None = None
    require_gpu: bool | None = None
    allow_skips: bool | None = None
    lint: bool | None = None
    archs: tuple[str, ...] = ()
    timeout_s: float | None = None  # overrides ci.thorough_timeout
    run_info: RunInfo | None = None  # the CI run this is part of (the Action fills it)
    extra_env: dict[str, str] = field(default_factory=dict)
    shard: Shard | None = None  # run only this shard's cases (`--shard K/N`)


@dataclass(frozen=True)
class Settings:
    """RunOptions resolved against the config."""

    suite: Suite
    seed: int
    iterations: int  # cases per op and dtype (the op's first dtype in the quick suite)
    extra_iterations: int | None  # quick suite: cases for each further dtype (None: `iterations`)
    jobs: int
    lint_jobs: int  # compiles are independent processes: every core unless --jobs says otherwise
    timeout_s: float  # the whole run
    timeout_source: str  # what set it, for messages: "--timeout" or "ci.thorough_timeout"
    require_gpu: bool
    allow_skips: bool  # skipped ops and cases may be part of a pass ("passed with N skipped")
    lint: bool
    archs: tuple[str, ...]
    dtypes: tuple[str, ...]  # only these dtypes (empty: the suite's)
    out_dir: Path
    run_info: RunInfo | None
    extra_env: dict[str, str]

    @classmethod
    def resolve(cls, config: Config, options: RunOptions) -> Settings:
        """The run's settings: the command line's options over the config's values over the defaults (suite,
        master seed, iterations, deadline, jobs, output directory, ...)."""
        suite = options.suite
        default_iterations = (
            config.ci.quick_iterations if suite is Suite.QUICK else config.ci.thorough_iterations
        )
        return cls(
            suite=suite,
            seed=master_seed(config, options.seed, suite),
            iterations=options.iterations or default_iterations,
            extra_iterations=config.ci.quick_extra_dtype_iterations
            if suite is Suite.QUICK and not options.iterations
            else None,
            jobs=max(1, options.jobs or config.ci.parallel_jobs or available_cores()),
            lint_jobs=max(1, options.jobs or available_cores()),
            timeout_s=options.timeout_s or config.ci.thorough_timeout,
            timeout_source="--timeout" if options.timeout_s else "ci.thorough_timeout",
            require_gpu=config.ci.require_gpu if options.require_gpu is None else options.require_gpu,
            allow_skips=config.ci.allow_skips if options.allow_skips is None else options.allow_skips,
            lint=config.ci.lint if options.lint is None else options.lint,
            archs=options.archs,
            dtypes=options.dtypes,
            out_dir=options.out_dir,
            run_info=options.run_info,
            extra_env=dict(options.extra_env),
        )

    def dtypes_for(self, config: Config, op: OpSpec) -> tuple[str, ...]:
        """The dtypes this run covers for `op`."""
        return suite_dtypes(op, config, self.suite, self.dtypes)


def master_seed(config: Config, seed: int | None, suite: Suite) -> int:
    """--seed, else a fresh random seed for the nightly suite or for `seed = 0` in the config (upstream's "a
    random seed per run"; recorded in the results, so every case still replays), else the config's."""
    if seed is not None:
        return seed
    if suite is Suite.NIGHTLY or config.validation.seed == RANDOM_SEED:
        return secrets.randbits(64)
    if config.validation.seed is not None:
        return config.validation.seed
    return DEFAULT_SEED


def select_ops(config: Config, names: Sequence[str]) -> tuple[OpSpec, ...]:
    """The ops named (each once, in the order given), or every op; a ConfigError for an unknown name. A
    launchable [[kernels]] entry can be named like an op (replay, minimize and `run --op` of a kernel's case)."""
    if not names:
        return config.ops
    known = {op.name: op for op in (*config.ops, *config.kernel_ops)}
    missing = [n for n in names if n not in known]
    if missing:
        hint = difflib.get_close_matches(missing[0], list(known), n=1)
        raise ConfigError(
            f"--op {missing[0]!r} is not an op in {config.path.name}"
            + (f" (did you mean {hint[0]!r}?)" if hint else "")
            + f". Ops: {', '.join(known) or 'none'}."
        )
    return tuple(known[n] for n in dict.fromkeys(names))
