"""Upstream's `gpuemu.Client`, without a daemon: each method runs gpuemu-ci's gate (or its oracle) here.

    client = Client()                                   # finds gpuemu.toml from the working directory
    results = client.fuzz_op_client_side("matmul", run_op=lambda i: my_matmul(i["a"], i["b"]), iterations=100)
    print(f"Passed: {results.passed}/{results.total}")

The ops are gpuemu.toml's (their inputs, reference and error model); `run_op` receives the inputs dict as NumPy
arrays, as upstream's client decoded them, and its output is judged against the fp64 reference."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuemu_ci import __version__
from gpuemu_ci.api import OpCheckFailed, check
from gpuemu_ci.compat.single_call import ValidationResult, judge_call
from gpuemu_ci.config.load import load_config
from gpuemu_ci.config.model import Config, Distribution, Framework, OpSpec
from gpuemu_ci.errors import UsageError
from gpuemu_ci.fuzz.case import build_case
from gpuemu_ci.pipeline.settings import RunOptions, Settings
from gpuemu_ci.plan.expand import plan_op
from gpuemu_ci.results.model import OpResult


@dataclass(frozen=True)
class FuzzFailure:
    """One failing case: upstream's `seed` and `failures` (a list of {"kind", "message"}), and gpuemu-ci's
    `replay` command and inputs."""

    seed: int
    failures: list[dict[str, str]]
    dtype: str
    shapes: dict[str, tuple[int, ...]]
    replay: str
    passed: bool = False


@dataclass(frozen=True)
class FuzzResults:
    """Upstream's result of a fuzz: `passed`/`total` count cases; `failures` are the recorded failing cases."""

    seed: int
    total: int
    passed: int
    failed: int
    failures: list[FuzzFailure] = field(default_factory=list)
    result: OpResult | None = None  # gpuemu-ci's whole result for the op


class Client:
    """Upstream's client. `socket_path` and `timeout_ms` are accepted and unused (there is no daemon);
    `config`: the gpuemu.toml to use (default: found from the working directory); `out_dir`: where failing
    cases' input snapshots go."""

    def __init__(
        self,
        socket_path: str | None = None,
        timeout_ms: int | None = None,
        *,
        config: str | Path | Config | None = None,
        out_dir: str | Path = "gpuemu-out",
    ) -> None:
        self._config_source = config
        self._config: Config | None = config if isinstance(config, Config) else None
        self.out_dir = Path(out_dir)

    @property
    def config(self) -> Config:
        """The gpuemu.toml the client stands for, loaded on first use (from the path given, else found from
        the working directory)."""
        if self._config is None:
            source = self._config_source
            self._config = load_config(Path(source) if isinstance(source, str | Path) else None)
        return self._config

    def ping(self) -> dict[str, Any]:
        """Upstream's `ping` answer: the version, `daemon: False` (gpuemu-ci runs in-process) and the config's
        path."""
        return {"version": f"gpuemu-ci {__version__}", "daemon": False, "config": str(self.config.path)}

    def _op(self, op_name: str) -> OpSpec:
        known = [op.name for op in self.config.ops]
        if op_name not in known:
            close = difflib.get_close_matches(op_name, known, n=1)
            raise UsageError(
                f"op {op_name!r} is not in {self.config.path}"
                + (f" (did you mean {close[0]!r}?)" if close else "")
                + ": gpuemu-ci takes an op's inputs, reference and error model from its [[ops]] entry; declare "
                "it there (name, reference, and its inputs unless they can be read from the reference)"
            )
        return self.config.op(op_name)

    def fuzz_op_client_side(
        self,
        op_name: str,
        run_op: Callable[[dict[str, Any]], Any],
        iterations: int = 100,
        seed: int | None = None,
        fail_fast: bool = False,
        op_schema: Mapping[str, Any] | None = None,
        dtypes: Sequence[str] | None = None,
        value_distribution: str | None = None,
    ) -> FuzzResults:
        """Fuzz `run_op` (called with the inputs dict, NumPy arrays) with the op's schema: `iterations` cases per
        dtype, judged against the fp64 reference. `fail_fast` is accepted (every case still runs);
        `value_distribution`: only "regular", "boundary" or "adversarial" values."""
        op = self._op(op_name)
        if op_schema is not None:
            raise UsageError(
                "op_schema: gpuemu-ci reads an op's dims and inputs from gpuemu.toml ([ops.dims], [ops.inputs]); "
                "declare them there"
            )
        shapes = op.shapes
        if value_distribution is not None:
            try:
                shapes = dataclasses.replace(shapes, distributions=(Distribution(value_distribution),))
            except ValueError:
                choices = ", ".join(d.value for d in Distribution)
                raise UsageError(f"value_distribution {value_distribution!r}: one of {choices}") from None
        # run_op gets NumPy arrays, as upstream's client decoded them, whatever the op's framework.
        targets = dataclasses.replace(op.targets, framework=Framework.NUMPY)
        variant = dataclasses.replace(op, shapes=shapes, targets=targets)
        config = dataclasses.replace(
            self.config, ops=tuple(variant if o.name == op_name else o for o in self.config.ops)
        )
        names = tuple(spec.name for spec in op.shapes.inputs)

        def call(**arrays: Any) -> Any:
            try:
                return run_op({name: arrays[name] for name in names if name in arrays})
            except TypeError as exc:
                if "ndarray" not in str(exc):
                    raise
                raise TypeError(
                    f"{exc} (run_op receives the inputs dict as NumPy arrays, as upstream's client decoded them; "
                    'convert what the op needs, e.g. torch.from_numpy(inputs["a"]))'
                ) from exc

        call.__name__ = getattr(run_op, "__name__", "run_op")
        try:
            result = check(
                op_name,
                call,
                config=config,
                iterations=iterations,
                seed=seed,
                dtypes=tuple(dtypes or ()),
                out_dir=self.out_dir,
                isolate=False,
            )
        except OpCheckFailed as failed:
            result = failed.result
        master = Settings.resolve(config, RunOptions(seed=seed)).seed
        failures = [
            FuzzFailure(
                f.case_seed, [{"kind": f.kind.value, "message": f.message}], f.dtype, dict(f.shapes), f.replay
            )
            for f in result.failures
        ]
        return FuzzResults(
            master,
            int(result.cases_total),
            int(result.cases_passed),
            int(result.cases_failed),
            failures,
            result,
        )

    def get_test_batch(
        self,
        op_name: str,
        count: int = 10,
        seed: int | None = None,
        op_schema: Mapping[str, Any] | None = None,
        dtypes: Sequence[str] | None = None,
    ) -> list[dict[str, Any]]:
        """`count` cases of the op as upstream hands them out: {"seed", "inputs" (NumPy, C-contiguous), "dtype",
        "shape" (of the first input), "kwargs"}; run the op on each and `submit_output` it."""
        op = self._op(op_name)
        if op_schema is not None:
            raise UsageError("op_schema: declare the op's dims and inputs in gpuemu.toml")
        master = Settings.resolve(self.config, RunOptions(seed=seed)).seed
        chosen = tuple(dtypes or op.dtypes)
        cases = []
        for ref in plan_op(op, master, chosen, max(1, count // max(1, len(chosen)) + 1))[:count]:
            case = build_case(op, ref.seed, self.config.root)
            first = next(iter(case.logical.values()), None)
            cases.append(
                {
                    "seed": ref.seed,
                    "inputs": {name: array.copy() for name, array in case.logical.items()},
                    "dtype": case.dtype,
                    "shape": list(first.shape) if first is not None else [],
                    "kwargs": dict(case.kwargs),
                }
            )
        return cases

    def submit_output(
        self, op_name: str, inputs: Mapping[str, Any], output: Any, seed: int | None = None, **kwargs: Any
    ) -> ValidationResult:
        """Judge `output` for `inputs` against the op's reference (upstream's SubmitOutput)."""
        self._op(op_name)
        return judge_call(self.config, op_name, inputs, output, kwargs, seed=seed, capture_dir=self.out_dir)

    def validate_op(
        self, op_name: str, inputs: Mapping[str, Any], output: Any, **kwargs: Any
    ) -> ValidationResult:
        """Judge one output (upstream's ValidateOp)."""
        return self.submit_output(op_name, inputs, output, **kwargs)

    def store_baseline(self, tag: str) -> Path:
        """Save the last run's results (out_dir/results.json) as the baseline TAG, as `gpuemu-ci baseline TAG`."""
        from gpuemu_ci.diff.baseline import save_tagged, tagged_baseline

        target = tagged_baseline(self.config.root, tag)
        source = self.out_dir / "results.json"
        if not source.is_file():
            raise UsageError(f"no {source} to save as baseline {tag!r}: run the suite first")
        save_tagged(source, target)
        return target

    def minimize(self, seed: int, strategy: str = "binary-search-dims", max_iters: int = 100) -> Any:
        """Upstream's minimize: here a command, since it runs the op in worker processes."""
        raise UsageError(
            f"Client.minimize: run `gpuemu-ci minimize {seed} --max-iters {max_iters}` (it re-runs the op)"
        )

    def reproduce(self, seed: int) -> Any:
        """Not supported in-process: raises UsageError naming the `gpuemu-ci replay` command that re-runs the
        case."""
        raise UsageError(
            f"Client.reproduce: run `gpuemu-ci replay --op OP --seed {seed}` (it re-runs the case)"
        )

    def lint_kernel(self, ptx: str, kernel_name: str | None = None) -> Any:
        """Not supported in-process: raises UsageError naming the `gpuemu-ci lint` command that does it."""
        raise UsageError(
            "Client.lint_kernel: run `gpuemu-ci lint --kernel NAME --ptx FILE` (ptxas on the file)"
        )
