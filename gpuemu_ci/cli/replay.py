"""`gpuemu-ci replay` and `gpuemu-ci minimize`: re-run failures from their seed or snapshot, and shrink them."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

import click

from gpuemu_ci.api import target_from_text
from gpuemu_ci.backends.interface import CallTarget, TargetKind
from gpuemu_ci.cli.options import config_option, out_option
from gpuemu_ci.config.load import load_config
from gpuemu_ci.config.model import Config
from gpuemu_ci.errors import ExitCode, UsageError
from gpuemu_ci.pipeline.minimize import minimize
from gpuemu_ci.pipeline.replay import ReplayOutcome, explanation, replay
from gpuemu_ci.pipeline.session import Session
from gpuemu_ci.pipeline.settings import RunOptions, select_ops
from gpuemu_ci.render.describe import describe_arrays, describe_inputs
from gpuemu_ci.results.codec import read_results
from gpuemu_ci.results.model import Failure, Results
from gpuemu_ci.results.snapshots import read_snapshot


def _op_of_seed(out_dir: Path, seed: int) -> str:
    """The op whose recorded failure has this case seed, in OUT/results.json (upstream's `minimize SEED`)."""
    path = out_dir / "results.json"
    if not path.is_file():
        raise UsageError(f"no {path} to find seed {seed} in: give --op OP (or run the suite first)")
    results = read_results(path)
    ops = sorted({op.name for op in results.ops for f in op.failures if f.case_seed == seed})
    if len(ops) != 1:
        found = "no failure" if not ops else f"failures of {', '.join(ops)}"
        raise UsageError(f"{path} has {found} with seed {seed}: give --op OP")
    return ops[0]


def _parse_dims(text: str | None) -> dict[str, int] | None:
    if not text:
        return None
    dims: dict[str, int] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep or not value.strip().isdigit():
            raise UsageError(f"--dims expects NAME=SIZE,NAME=SIZE; got {part!r}")
        dims[name.strip()] = int(value)
    return dims


@click.command("replay")
@click.argument("results", required=False, type=click.Path(dir_okay=False, path_type=Path))
@config_option
@click.option(
    "--case", "case_ids", multiple=True, help="Case id from results.json (e.g. softmax/7); default: all."
)
@click.option("--op", "op_name", help="With --seed or --snapshot: the op to replay.")
@click.option("--seed", type=click.IntRange(0, 2**64 - 1), help="Case seed (from a failure's replay line).")
@click.option(
    "--snapshot",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Replay the exact saved inputs instead of regenerating them from the seed.",
)
@click.option(
    "--from-snapshots",
    is_flag=True,
    help="With a results file: replay each failure from its saved .npz instead of its seed.",
)
@click.option("--dims", "dims_text", help="Minimized dims, e.g. M=3,N=65 (from `gpuemu-ci minimize`).")
@click.option("--scale", type=float, help="Minimized input scale (from `gpuemu-ci minimize`).")
@click.option(
    "--target",
    "target_text",
    help="Run this function instead of the op's own: package.module:function or path/to/file.py:function "
    "(the replay command of a gpuemu_ci.check failure).",
)
@click.option(
    "--inputs-digest",
    help="With --seed: the inputs digest of the recorded case (results.json); a replay that builds other "
    "inputs says so instead of judging them.",
)
@click.option(
    "--explain",
    is_flag=True,
    help="For each case that still fails, print the analysis: where in the output it is wrong (the pattern) "
    "and the error map drawn for it (error / allowance per element, a PNG under --out).",
)
@out_option("Directory for the snapshots of cases that still fail.")
def replay_command(
    results: Path | None,
    config_path: Path | None,
    case_ids: tuple[str, ...],
    op_name: str | None,
    seed: int | None,
    snapshot: Path | None,
    from_snapshots: bool,
    dims_text: str | None,
    scale: float | None,
    target_text: str | None,
    inputs_digest: str | None,
    explain: bool,
    out_dir: Path,
) -> int:
    """Re-run failing cases and print their verdict. Exit 1 when a case still fails, 0 when none does, 3 when a
    replay built other inputs than the recorded case's or could not run (the op would not load, or it needs a
    GPU this machine lacks)."""
    config = load_config(config_path)
    with Session(config, RunOptions(out_dir=out_dir, jobs=1)) as session:
        if results is not None:
            tally = _replay_recorded(session, config, results, case_ids, from_snapshots, explain, out_dir)
        else:
            tally = _replay_one(
                session,
                config,
                op_name,
                seed,
                snapshot,
                _parse_dims(dims_text),
                scale,
                target_text,
                inputs_digest,
                explain,
                out_dir,
            )
    if tally.other_inputs or tally.not_run:
        return int(
            ExitCode.INFRASTRUCTURE
        )  # the replay could not rebuild or run the case: no verdict either way
    return int(ExitCode.GATE_FAILED if tally.still_failing else ExitCode.PASSED)


@dataclass
class _Tally:
    explain: bool = False
    out_dir: Path = Path(".")
    still_failing: int = 0
    other_inputs: int = 0
    not_run: int = 0

    def add(self, label: str, outcome: ReplayOutcome, recorded_kind: str | None) -> None:
        self.still_failing += _report(label, outcome, recorded_kind)
        self.other_inputs += outcome.other_inputs
        self.not_run += outcome.not_run
        if self.explain and outcome.failed:
            for line in explanation(outcome.report, self.out_dir):
                click.echo(f"  {line}", err=True)


def _chosen_failures(
    document: Results, results: Path, case_ids: tuple[str, ...]
) -> list[tuple[str, Failure]]:
    """(op name, failure) of the recorded failures, those named by `case_ids` when given."""
    failures = [(op.name, f) for op in document.ops for f in op.failures]
    if case_ids:
        known = {f.case_id for _, f in failures}
        missing = [c for c in case_ids if c not in known]
        if missing:
            raise UsageError(f"case {missing[0]!r} is not among the failures in {results}")
        failures = [(n, f) for n, f in failures if f.case_id in case_ids]
    return failures


def _replay_recorded(
    session: Session,
    config: Config,
    results: Path,
    case_ids: tuple[str, ...],
    from_snapshots: bool,
    explain: bool,
    out_dir: Path,
) -> _Tally:
    """Replay the failures a results file records (from their seeds, or their snapshots)."""
    tally = _Tally(explain, out_dir)
    document = read_results(results)
    failures = _chosen_failures(document, results, case_ids)
    if not failures:
        click.echo(f"{results} records no failures: nothing to replay", err=True)
        return tally
    for name, failure in failures:
        op = select_ops(config, [name])[0]
        snap = None
        if from_snapshots:
            if not failure.snapshot:
                raise UsageError(f"failure {failure.case_id} has no snapshot")
            snap = results.parent / failure.snapshot
        outcome = replay(
            session,
            op,
            seed=failure.case_seed,
            snapshot=snap,
            generator_version=document.generator_version,
            inputs_digest=failure.inputs_digest,
            explain=explain,
        )
        tally.add(failure.case_id, outcome, failure.kind)
    return tally


def _replay_one(
    session: Session,
    config: Config,
    op_name: str | None,
    seed: int | None,
    snapshot: Path | None,
    dims: dict[str, int] | None,
    scale: float | None,
    target_text: str | None,
    inputs_digest: str | None,
    explain: bool,
    out_dir: Path,
) -> _Tally:
    """Replay one case given on the command line: an op and a seed (with the minimizer's dims and scale),
    or a snapshot; with another function as the op when `target_text` names one."""
    tally = _Tally(explain, out_dir)
    if snapshot is not None and not op_name:
        op_name = str(read_snapshot(snapshot)[1].get("op") or "")  # a snapshot knows its op
    if not op_name or (seed is None and snapshot is None):
        raise UsageError("give a results file, --snapshot FILE, or --op NAME with --seed SEED")
    op = select_ops(config, [op_name])[0]
    target = None
    if target_text is not None:
        spec, root = target_from_text(target_text)
        target = CallTarget(TargetKind.CALLABLE, spec, root, op.targets.framework)
    outcome = replay(
        session,
        op,
        seed=seed,
        snapshot=snapshot,
        dims=dims,
        scale=scale,
        target=target,
        inputs_digest=inputs_digest,
        explain=explain,
    )
    tally.add(f"{op_name} seed {outcome.seed}", outcome, None)
    report = outcome.report
    if report.shapes:
        click.echo(
            f"  inputs: {describe_inputs(report.shapes, report.strides, report.layouts)}; "
            f"dtype {report.dtype}; {report.distribution}; kwargs {json.dumps(dict(report.kwargs))}",
            err=True,
        )
    return tally


def _report(label: str, outcome: ReplayOutcome, recorded_kind: str | None) -> int:
    message = outcome.message
    if outcome.other_inputs:
        click.echo(f"BUILT OTHER INPUTS {label}", err=True)
    elif outcome.not_run:
        click.echo(f"COULD NOT RUN {label}", err=True)
    elif outcome.failed:
        status = "REPRODUCED" if recorded_kind is None or recorded_kind in message else "FAILS (differently)"
        click.echo(f"{status} {label}", err=True)
    else:
        click.echo(f"DID NOT REPRODUCE {label}: the case passes now", err=True)
    for line in message.splitlines():
        click.echo(f"  {line}", err=True)
    return 1 if outcome.failed or outcome.other_inputs else 0


@click.command("minimize")
@config_option
@click.argument("seed_argument", metavar="[SEED]", required=False, type=click.IntRange(0, 2**64 - 1))
@click.option(
    "--op", "op_name", help="The op of the failing case (default: found by seed in --out's results)."
)
@click.option("--seed", type=click.IntRange(0, 2**64 - 1), help="The failing case's seed.")
@click.option("--max-runs", type=click.IntRange(1), default=200, show_default=True, help="Op runs at most.")
@click.option("--max-iters", type=click.IntRange(1), hidden=True, help="Upstream's name of --max-runs.")
@click.option(
    "--strategy",
    type=click.Choice(["binary-search-dims", "binary-search-values"]),
    hidden=True,
    default=None,
    help="Upstream's strategies; both passes always run here.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the minimized case as JSON on stdout.")
@out_option("Directory for the snapshots of the cases it runs.")
def minimize_command(
    config_path: Path | None,
    seed_argument: int | None,
    op_name: str | None,
    seed: int | None,
    max_runs: int,
    max_iters: int | None,
    strategy: str | None,
    as_json: bool,
    out_dir: Path,
) -> int:
    """Shrink a failing case by re-running the op: dims, layouts, then value magnitudes and digits, keeping the
    failure's kind. Prints the smallest failing case in words and saves it as a replayable snapshot.

    Upstream's form, `minimize SEED [--strategy S] [--max-iters N]`, works too: the op is the one whose failure
    has that seed in the last run's results; both strategies' passes (dims, then values) always run."""
    if seed is not None and seed_argument is not None and seed != seed_argument:
        raise UsageError("the seed is given twice, differently")
    seed = seed if seed is not None else seed_argument
    if seed is None:
        raise UsageError("give the failing case's seed: gpuemu-ci minimize SEED (or --seed SEED)")
    if strategy is not None:
        click.echo(
            f"gpuemu-ci: note: --strategy {strategy}: gpuemu-ci shrinks the dims, then the layouts, then the "
            "values, in every run",
            err=True,
        )
    max_runs = max_iters or max_runs
    config = load_config(config_path)
    op_name = op_name or _op_of_seed(out_dir, seed)
    op = select_ops(config, [op_name])[0]
    with Session(config, RunOptions(out_dir=out_dir, jobs=1)) as session:
        result = minimize(session, op, seed, max_runs=max_runs)
    snapshot = out_dir / result.snapshot
    command = (
        f"gpuemu-ci replay --config {shlex.quote(str(config_path or config.path.name))} "
        f"--snapshot {shlex.quote(str(snapshot))}"
    )
    layouts = {name: choice.layout.value for name, choice in result.case.layouts.items()}
    click.echo(
        f"minimized {op_name} seed {seed} in {result.runs} runs, still a {result.kind.value}"
        + (f" of the {result.output}" if result.output else "")
        + ":",
        err=True,
    )
    click.echo(f"  {result.in_words()}", err=True)
    click.echo(
        f"  inputs: {describe_arrays(result.case.arrays, layouts)}; dtype {result.case.dtype}", err=True
    )
    for line in result.message.splitlines():
        click.echo(f"  {line}", err=True)
    click.echo(f"  replay: {command}", err=True)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "op": op_name,
                    "seed": seed,
                    "kind": result.kind.value,
                    "output": result.output,
                    "original_dims": result.original_dims,
                    "dims": result.dims,
                    "made_contiguous": list(result.made_contiguous),
                    "scale_exponent": result.scale_exponent,
                    "rounded": result.rounded,
                    "changes": result.in_words(),
                    "runs": result.runs,
                    "snapshot": str(snapshot),
                    "replay": command,
                }
            )
        )
    return int(ExitCode.GATE_FAILED)
