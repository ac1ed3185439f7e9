"""The pytest plugin (entry point `pytest11`, name `gpuemu`): gpuemu-ci's checks as ordinary pytest tests.

Two ways in, both parametrized by op and dtype (ids `softmax-float32`, so `-k softmax` and `-k bfloat16`
select), both honouring `--gpuemu-seed`, `--gpuemu-suite` and `--gpuemu-config`:

* `pytest --gpuemu` collects every op of gpuemu.toml as a test `gpuemu.toml::softmax-float32`, run the way the
  gate runs it (its declared target, in an isolated worker); the config must lie under a collected path (run
  from the project root, or name it: `pytest --gpuemu gpuemu.toml`);
* the `gpuemu_op` fixture, in a test of your own: one test per op and dtype (narrowed with
  `@pytest.mark.gpuemu("softmax", dtypes=["float32"])`); `gpuemu_op.check()` checks the declared op,
  `gpuemu_op.check(my_softmax)` checks a callable against the op's schema and reference.

A failing case's seeds are kept in pytest's cache (`.pytest_cache`, key gpuemu/failing): the next run puts the
tests that failed first and replays their failing seeds before fuzzing anew, so a fix is confirmed on the
cases that broke. Output (snapshots, the report) goes to pytest's temporary directory.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuemu_ci import api
from gpuemu_ci.config.load import CONFIG_NAME, find_config, load_config
from gpuemu_ci.config.model import Config, Suite
from gpuemu_ci.errors import GpuemuError
from gpuemu_ci.onboard.record import install

RECORD_DEFAULT = "gpuemu-calls.jsonl"
CACHE_KEY = "gpuemu/failing"  # {"softmax-float32": [seed, ...]}
MARKER = "gpuemu"


def pytest_addoption(parser: pytest.Parser) -> None:
    """pytest hook: the `--gpuemu*` options and the `gpuemu_config` / `gpuemu_suite` ini keys."""
    group = parser.getgroup("gpuemu", "gpuemu-ci kernel checks")
    group.addoption(
        "--gpuemu", action="store_true", default=False, help=f"collect every op of {CONFIG_NAME} as a test"
    )
    group.addoption(
        "--gpuemu-config",
        metavar="PATH",
        default=None,
        help=f"the config (default: the nearest {CONFIG_NAME})",
    )
    group.addoption(
        "--gpuemu-seed", metavar="N", type=int, default=None, help="master seed (default: the config's)"
    )
    group.addoption(
        "--gpuemu-suite",
        choices=[suite.value for suite in Suite],
        default=None,
        help="how many cases per op (default: quick, or the gpuemu_suite ini value)",
    )
    group.addoption(
        "--gpuemu-record",
        metavar="PKG.MOD:FUNC",
        default=None,
        help="record the calls of this op during the test run, for `gpuemu-ci add PKG.MOD:FUNC --calls FILE`",
    )
    group.addoption(
        "--gpuemu-record-file",
        metavar="PATH",
        default=RECORD_DEFAULT,
        help=f"where --gpuemu-record writes the calls (default: {RECORD_DEFAULT})",
    )
    parser.addini("gpuemu_config", f"path of {CONFIG_NAME} (relative to the rootdir)", default="")
    parser.addini("gpuemu_suite", "suite the gpuemu tests run", default=Suite.QUICK.value)


def pytest_configure(config: pytest.Config) -> None:
    """pytest hook: installs the call recorder for `--gpuemu-record` (before any test imports the op's module)
    and registers the `gpuemu` marker."""
    target = config.getoption("--gpuemu-record")
    if target:
        # Before the tests import the op's module: the import hook replaces the function as it is defined.
        try:
            install(target, Path(config.getoption("--gpuemu-record-file")))
        except ValueError as exc:
            raise pytest.UsageError(f"gpuemu: --gpuemu-record: {exc}") from None
    config.addinivalue_line(
        "markers",
        f"{MARKER}(*ops, dtypes=None): the ops (and dtypes) of {CONFIG_NAME} a test using the gpuemu_op fixture "
        "runs for (default: all)",
    )


# --- what every gpuemu test shares ------------------------------------------------------------------------
@dataclass(frozen=True)
class RunSettings:
    """What every gpuemu test of one pytest run checks with: the config file (absolute), the suite, and the
    master seed (None: the config's)."""

    config_path: Path
    suite: str
    seed: int | None


def run_settings(config: pytest.Config) -> RunSettings:
    """The config file, suite and seed, from the command line, then the ini file, then the defaults."""
    option = config.getoption("--gpuemu-config")
    ini = str(config.getini("gpuemu_config") or "")
    if option:
        path = Path(option)
    elif ini:
        path = Path(config.rootpath) / ini
    else:
        try:
            path = find_config(Path(config.invocation_params.dir))
        except GpuemuError as exc:
            raise pytest.UsageError(f"gpuemu: {exc}") from exc
    suite = config.getoption("--gpuemu-suite") or str(config.getini("gpuemu_suite")) or Suite.QUICK.value
    return RunSettings(path.resolve(), suite, config.getoption("--gpuemu-seed"))


def load(settings: RunSettings) -> Config:
    """The config of `settings`; a config that cannot be loaded is a pytest usage error, not a traceback."""
    try:
        return load_config(settings.config_path)
    except GpuemuError as exc:
        raise pytest.UsageError(f"gpuemu: {exc}") from exc


def case_id(op: str, dtype: str) -> str:
    """A test's id and cache key for one op at one dtype (`softmax-float32`), so `-k` selects by either."""
    return f"{op}-{dtype}"


def cases_of(loaded: Config, ops: Sequence[str] = (), dtypes: Sequence[str] = ()) -> list[tuple[str, str]]:
    """(op, dtype) pairs of the config, narrowed to `ops` and `dtypes` when given."""
    known = {op.name for op in loaded.ops}
    unknown = [name for name in ops if name not in known]
    if unknown:
        raise pytest.UsageError(
            f"gpuemu: no op {', '.join(unknown)} in {loaded.path} (it has {', '.join(sorted(known))})"
        )
    return [
        (op.name, dtype)
        for op in loaded.ops
        if not ops or op.name in ops
        for dtype in op.dtypes
        if not dtypes or dtype in dtypes
    ]


@dataclass
class OpCase:
    """One op at one dtype, ready to check (what the gpuemu_op fixture gives a test)."""

    op: str
    dtype: str
    settings: RunSettings
    out_dir: Path
    cache: pytest.Cache | None
    shared: api.SharedSessions | None = None  # the test run's worker pool (None: a session per check)

    @property
    def key(self) -> str:
        """The case's id (`softmax-float32`): its test id and its key in the failing-seeds cache."""
        return case_id(self.op, self.dtype)

    def check(self, fn: Callable[..., Any] | None = None, **options: Any) -> api.OpResult:
        """Check the op (or `fn` against the op's schema and reference) at this dtype: first the seeds that
        failed last time, then the suite. Raises OpCheckFailed (an AssertionError) on a failure."""
        __tracebackhide__ = True
        common: dict[str, Any] = {
            "config": self.settings.config_path,
            "suite": self.settings.suite,
            "seed": self.settings.seed,
            "dtypes": (self.dtype,),
            "out_dir": self.out_dir,
            "shared": self.shared,
            **options,
        }
        try:
            remembered = self._remembered()
            if remembered:
                api.check(self.op, fn, seeds=remembered, **common)
            result = api.check(self.op, fn, **common)
        except api.OpCheckFailed as failed:
            self._remember(sorted({failure.case_seed for failure in failed.result.failures}))
            raise
        except GpuemuError as exc:  # a config or usage problem: a clear failure, not a traceback
            pytest.fail(f"gpuemu: {exc}", pytrace=False)
        self._remember([])
        return result

    def _remembered(self) -> list[int]:
        stored = self.cache.get(CACHE_KEY, {}) if self.cache is not None else {}
        seeds = stored.get(self.key, []) if isinstance(stored, dict) else []
        return [int(seed) for seed in seeds if isinstance(seed, int)]

    def _remember(self, seeds: list[int]) -> None:
        if self.cache is None:
            return
        stored = self.cache.get(CACHE_KEY, {})
        stored = dict(stored) if isinstance(stored, dict) else {}
        if seeds:
            stored[self.key] = seeds
        else:
            stored.pop(self.key, None)
        self.cache.set(CACHE_KEY, stored)


def previously_failing(config: pytest.Config) -> set[str]:
    """The case ids whose seeds failed in an earlier run (pytest's cache; empty without one)."""
    cache = getattr(config, "cache", None)
    stored = cache.get(CACHE_KEY, {}) if cache is not None else {}
    return set(stored) if isinstance(stored, dict) else set()


# --- one worker pool for the whole test run ------------------------------------------------------------
SHARED = pytest.StashKey[api.SharedSessions]()


def shared_sessions(config: pytest.Config) -> api.SharedSessions:
    """The test run's sessions: every gpuemu test checks in the same worker pool, started once, as `gpuemu-ci
    run` does (a pool per test made `pytest --gpuemu` about 5x slower than `gpuemu-ci run`)."""
    found = config.stash.get(SHARED, None)
    if found is None:
        factory = getattr(config, "_tmp_path_factory", None)
        out_dir = (
            factory.mktemp("gpuemu-shared")
            if factory is not None
            else Path(tempfile.mkdtemp(prefix="gpuemu-shared-"))
        )
        found = config.stash[SHARED] = api.SharedSessions(out_dir)
    return found


def pytest_unconfigure(config: pytest.Config) -> None:
    """pytest hook: stops the run's shared worker pool, if a test started one."""
    shared = config.stash.get(SHARED, None)
    if shared is not None:
        shared.close()


# --- the fixture ----------------------------------------------------------------------------------------
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """pytest hook: a test using `gpuemu_op` runs once per (op, dtype) of the config, narrowed by its
    `@pytest.mark.gpuemu(...)`."""
    if "gpuemu_op" not in metafunc.fixturenames:
        return
    loaded = load(run_settings(metafunc.config))
    marker = metafunc.definition.get_closest_marker(MARKER)
    ops = tuple(marker.args) if marker is not None else ()
    dtypes = tuple(marker.kwargs.get("dtypes") or ()) if marker is not None else ()
    pairs = cases_of(loaded, ops, dtypes)
    metafunc.parametrize("gpuemu_op", pairs, ids=[case_id(*pair) for pair in pairs], indirect=True)


@pytest.fixture
def gpuemu_op(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> OpCase:
    """One op and dtype of gpuemu.toml (the test is parametrized over them); call `.check()` or
    `.check(my_function)`."""
    op, dtype = request.param
    return OpCase(
        op,
        dtype,
        run_settings(request.config),
        tmp_path_factory.mktemp(f"gpuemu-{op}-{dtype}"),
        getattr(request.config, "cache", None),
        shared_sessions(request.config),
    )


# --- `--gpuemu`: the config's ops as collected tests ----------------------------------------------------
def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """pytest hook: with `--gpuemu`, the run's config file is collected as one test per op and dtype (any
    other gpuemu.toml is left alone)."""
    config = parent.config
    if not config.getoption("--gpuemu") or file_path.name != CONFIG_NAME:
        return None
    if file_path.resolve() != run_settings(config).config_path:
        return None
    return ConfigFile.from_parent(parent, path=file_path)


def pytest_sessionstart(session: pytest.Session) -> None:
    """pytest hook: with `--gpuemu`, a missing or broken config stops the run as a usage error."""
    # A missing or broken config is a usage error before anything runs (exit 4), not a collection error.
    if session.config.getoption("--gpuemu"):
        settings = run_settings(session.config)
        if not settings.config_path.is_file():
            raise pytest.UsageError(f"gpuemu: config file not found: {settings.config_path}")
        load(settings)


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """pytest hook: the tests whose cases failed last time run first."""
    # Tests whose cases failed last time run first (pytest's --failed-first, for gpuemu's own failures).
    failing = previously_failing(config)
    if not failing:
        return
    first = [item for item in items if _case_key(item) in failing]
    if first:
        rest = [item for item in items if _case_key(item) not in failing]
        items[:] = first + rest


def _case_key(item: pytest.Item) -> str | None:
    if isinstance(item, OpItem):
        return item.case.key
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "gpuemu_op" in callspec.params:
        op, dtype = callspec.params["gpuemu_op"]
        return case_id(op, dtype)
    return None


class ConfigFile(pytest.File):
    """gpuemu.toml as pytest collects it under `--gpuemu`."""

    def collect(self) -> Iterator[pytest.Item]:
        """One OpItem per (op, dtype) of the config."""
        settings = run_settings(self.config)
        loaded = load(settings)
        cache = getattr(self.config, "cache", None)
        for op, dtype in cases_of(loaded):
            yield OpItem.from_parent(
                self, name=case_id(op, dtype), op=op, dtype=dtype, settings=settings, cache=cache
            )


class OpItem(pytest.Item):
    """One op at one dtype as a collected test (`gpuemu.toml::softmax-float32`): runs the check the gate runs,
    in the run's shared worker pool."""

    def __init__(
        self, *, op: str, dtype: str, settings: RunSettings, cache: pytest.Cache | None, **kwargs: Any
    ):
        super().__init__(**kwargs)
        self.case = OpCase(op, dtype, settings, Path(), cache, shared_sessions(self.config))
        self.add_marker(MARKER)

    def runtest(self) -> None:
        """Checks the case (remembered failing seeds first, then the suite), output in pytest's temporary
        directory."""
        # The factory behind the tmp_path_factory fixture (a plain Item cannot request fixtures).
        factory = getattr(self.config, "_tmp_path_factory", None)
        self.case.out_dir = (
            factory.mktemp(f"gpuemu-{self.case.key}")
            if factory is not None
            else Path(tempfile.mkdtemp(prefix=f"gpuemu-{self.case.key}-"))
        )
        self.case.check()

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        """A failed check as gpuemu-ci's own message (the failing cases and their seeds), not a traceback."""
        if isinstance(excinfo.value, api.OpCheckFailed):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo, style=style))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        """Where pytest's report locates the test: the config file, and `gpuemu: op [dtype]`."""
        return self.path, None, f"gpuemu: {self.case.op} [{self.case.dtype}]"
