"""The Action's inputs (action.yml), validated once from the runner's `INPUT_*` variables."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gpuemu_ci.action.setup_step import parse_requirements
from gpuemu_ci.config.model import Suite
from gpuemu_ci.errors import UsageError
from gpuemu_ci.github.context import ActionContext
from gpuemu_ci.github.limits import DEFAULT_TOTAL_S

DEFAULT_CACHE_DIR = ".gpuemu-cache"
# Where the time allowed for GitHub API work in all (github/limits.py) can be set besides the input: a
# workflow's or a runner's environment, for every step at once.
API_TIMEOUT_VARIABLE = "GPUEMU_API_TIMEOUT"
MAX_API_TIMEOUT_S = 6 * 3600  # a job's own limit


class Mode(StrEnum):
    """The Action's `mode` input: what the step does."""

    GATE = "gate"
    BASELINE = "baseline"
    NIGHTLY = "nightly"
    SIGN = "sign"
    COMMENT = "comment"


@dataclass(frozen=True)
class ActionInputs:
    """The action.yml inputs, validated."""

    config: str
    suite: Suite
    seed: int | None
    mode: Mode
    baseline: str
    comment: bool
    fail_on_regression: bool | None
    require_gpu: bool | None
    output_dir: str
    results: str | None
    job_key: str
    setup: str | None = None  # a shell command that installs what the ops need
    requirements: tuple[str, ...] = ()  # requirement files, installed before `setup`
    cache_dir: str = DEFAULT_CACHE_DIR
    allow_skips: bool | None = None
    signing_key: str = field(default="", repr=False)
    api_timeout_s: float = DEFAULT_TOTAL_S  # GitHub API work in all: baseline, comment, issues
    api_timeout_from: str = ""  # where it was set: "input api_timeout", "GPUEMU_API_TIMEOUT" or "" (default)

    @classmethod
    def from_context(
        cls, ctx: ActionContext, *, signing_key: str = "", env: Mapping[str, str] | None = None
    ) -> ActionInputs:
        """The Action's inputs read from the runner's context; a value that is not valid (mode, suite, seed,
        ...) is a UsageError naming the input."""
        mode_text = ctx.input("mode", "gate") or "gate"
        suite_text = ctx.input("suite", "quick") or "quick"
        seed_text = ctx.input("seed")
        try:
            mode = Mode(mode_text)
        except ValueError:
            raise UsageError(
                f"input mode={mode_text!r}: expected one of {', '.join(m.value for m in Mode)}"
            ) from None
        try:
            suite = Suite(suite_text)
        except ValueError:
            raise UsageError(f"input suite={suite_text!r}: expected quick or thorough") from None
        if seed_text is not None and not (
            seed_text.isascii() and seed_text.isdigit() and int(seed_text) < 2**64
        ):
            raise UsageError(f"input seed={seed_text!r}: expected an integer between 0 and 2^64 - 1")

        def optional_bool(name: str) -> bool | None:
            return None if ctx.input(name) is None else ctx.input_bool(name, False)

        api_timeout_s, api_timeout_from = api_timeout(
            ctx.input("api_timeout"), (env or {}).get(API_TIMEOUT_VARIABLE)
        )

        return cls(
            config=ctx.input("config", "gpuemu.toml") or "gpuemu.toml",
            # Nightly mode is the thorough suite with a fresh seed, whatever `suite` says (the nightly
            # template passes `suite: thorough`, which alone would replay the config's seed every night).
            suite=Suite.NIGHTLY if mode is Mode.NIGHTLY else suite,
            seed=int(seed_text) if seed_text is not None else None,
            mode=mode,
            baseline=ctx.input("baseline", "auto") or "auto",
            comment=ctx.input_bool("comment", True),
            fail_on_regression=optional_bool("fail_on_regression"),
            require_gpu=optional_bool("require_gpu"),
            allow_skips=optional_bool("allow_skips"),
            output_dir=ctx.input("output_dir", "gpuemu-out") or "gpuemu-out",
            results=ctx.input("results"),
            job_key=ctx.input("job_key") or ctx.job or "gpuemu-ci",
            setup=ctx.input("setup"),
            requirements=parse_requirements(ctx.input("requirements")),
            cache_dir=ctx.input("cache_dir", DEFAULT_CACHE_DIR) or DEFAULT_CACHE_DIR,
            signing_key=signing_key.strip(),
            api_timeout_s=api_timeout_s,
            api_timeout_from=api_timeout_from,
        )


def api_timeout(given: str | None, variable: str | None) -> tuple[float, str]:
    """(seconds, where they were set) for GitHub API work in all: the input, else the environment variable,
    else the default. A UsageError for anything but a number of seconds above 0 and at most a job's 6 hours."""
    for text, source in (
        (given, "input api_timeout"),
        ((variable or "").strip() or None, API_TIMEOUT_VARIABLE),
    ):
        if text is None:
            continue
        try:
            seconds = float(text)
        except ValueError:
            seconds = float("nan")
        if not 0 < seconds <= MAX_API_TIMEOUT_S:  # NaN fails too
            raise UsageError(
                f"{source}={text!r}: expected a number of seconds above 0 and at most {MAX_API_TIMEOUT_S}"
            )
        return seconds, source
    return DEFAULT_TOTAL_S, ""
