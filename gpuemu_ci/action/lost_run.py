"""The results document the Action writes itself when the gate process ended without writing one: killed (an
op that kills its parent, the machine's OOM killer) or stopped by a signal before it could write anything.

It says what happened, counts no case as run, and is never a pass: every op is an error with that message,
the verdict is incomplete and the exit code is non-zero, so the step fails and the comment says why."""

from __future__ import annotations

import signal

from gpuemu_ci import __version__
from gpuemu_ci.clock import utc_now
from gpuemu_ci.config.model import Config, Suite
from gpuemu_ci.errors import ExitCode
from gpuemu_ci.fuzz.values import GENERATOR_VERSION
from gpuemu_ci.pipeline.environment import environment
from gpuemu_ci.pipeline.gate import display_path
from gpuemu_ci.pipeline.op_runner import family_of
from gpuemu_ci.pipeline.settings import master_seed
from gpuemu_ci.results.model import ConfigInfo, OpResult, OpStatus, Results, RunInfo, ToolInfo, Verdict


def signal_name(number: int) -> str:
    """A signal number's name (`SIGKILL`), or `signal N` for a number Python does not know."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def why_lost(status: int) -> tuple[str, int]:
    """(what happened, the step's exit code) for the gate process's exit `status`: negative for the signal
    that killed it, 130 or 143 when it caught SIGINT or SIGTERM before it had anything to write."""
    caught = {128 + signal.SIGINT: signal.SIGINT, 128 + signal.SIGTERM: signal.SIGTERM}
    if status in caught or -status in caught.values():
        name = signal_name(caught.get(status, -status))
        return f"interrupted by {name} before any case result was written; no case counts as run", 128 + int(
            caught.get(status, -status)
        )
    if status < 0:
        return (
            f"interrupted: the gate process was killed ({signal_name(-status)}) before it wrote results.json, so "
            "no case result survived (code under test can kill its own process, not the Action's)",
            int(ExitCode.INFRASTRUCTURE),
        )
    return f"the gate process exited with status {status} without writing results.json", int(
        ExitCode.INFRASTRUCTURE
    )


def lost_run(
    config: Config,
    *,
    suite: str,
    seed: int | None,
    run: RunInfo | None,
    started_at: str,
    why: str,
    exit_code: int,
) -> Results:
    """A document for a gate run whose own results were lost: every op an error saying `why`."""
    ops = tuple(
        OpResult(
            name=op.name,
            status=OpStatus.ERROR,
            family=family_of(op),
            comparator=None,
            line=op.line,
            framework=op.targets.framework.value,
            interpreter=None,
            skip_reason=None,
            message=f"no case result: {why}",
            cases_total=0,
            cases_passed=0,
            cases_failed=0,
            cases_errored=0,
        )
        for op in config.ops
    )
    return Results(
        tool=ToolInfo(version=__version__),
        generator_version=GENERATOR_VERSION,
        seed=master_seed(config, seed, Suite(suite)),
        suite=suite,
        started_at=started_at,
        finished_at=utc_now(),
        config=ConfigInfo(path=display_path(config.path), sha256=config.sha256, project=config.project.name),
        environment=environment(None),
        verdict=Verdict.INCOMPLETE,
        exit_code=exit_code,
        cut_short=True,
        ops=ops,
        run=run,
        notes=(why,),
    )
