"""The suite run of the Action's gate, baseline and nightly modes, in a confined child process.

The Action's own process holds the token; the suite (ops, references, scripts, hooks, the kernels' compiles)
runs in `gpuemu-ci action-gate REQUEST`, started by `sandbox.spawn` with no secret in its environment,
under an unprivileged identity, and with the virtual environment of the setup step when there is one. It
writes results.json and exits with the gate's code. The parent then kills anything it left running, reads
results.json back as the untrusted document it is (validated, the verdict decided again) and publishes.
"""

from __future__ import annotations

from pathlib import Path

import click
import msgspec

from gpuemu_ci.config.model import Suite
from gpuemu_ci.results.model import RunInfo


class GateRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What the child runs: the parent's resolved inputs, nothing secret."""

    config: str
    suite: str
    out_dir: str
    seed: int | None = None
    require_gpu: bool | None = None
    run: RunInfo | None = None
    allow_skips: bool | None = None


def encode_request(request: GateRequest) -> str:
    """The request as the child's one argument (a command line is readable by anyone: nothing secret here)."""
    return msgspec.json.encode(request).decode()


@click.command("action-gate", hidden=True)
@click.argument("request_json")
def action_gate_command(request_json: str) -> int:
    """The Action's suite run, as a confined child of `gpuemu-ci action` (not for direct use)."""
    from gpuemu_ci.config.load import load_config
    from gpuemu_ci.errors import UsageError
    from gpuemu_ci.pipeline.gate import run_gate
    from gpuemu_ci.pipeline.settings import RunOptions
    from gpuemu_ci.progress import StderrReporter
    from gpuemu_ci.render.summary import print_summary
    from gpuemu_ci.results.codec import write_results

    try:
        request = msgspec.json.decode(request_json, type=GateRequest)
    except msgspec.DecodeError as exc:
        raise UsageError(f"action-gate: not a gate request: {exc}") from None
    config = load_config(Path(request.config))
    options = RunOptions(
        suite=Suite(request.suite),
        seed=request.seed,
        out_dir=Path(request.out_dir),
        require_gpu=request.require_gpu,
        allow_skips=request.allow_skips,
        run_info=request.run,
    )
    results = run_gate(config, options, observer=StderrReporter())
    path = write_results(options.out_dir, results)
    print_summary(results, path)
    return results.exit_code
