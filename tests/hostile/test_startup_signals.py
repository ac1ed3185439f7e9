"""Issue 26, item 4: SIGINT or SIGTERM while gpuemu-ci is still starting (importing for a second or more) ends
it as cleanly as one during the run: exit 130 or 143, no traceback, and a results document that says no case
ran because of the signal (not "the suite timeout expired first").

The signal is sent the moment the process catches SIGTERM (its SigCgt mask in /proc), i.e. as soon as the
entry point has installed its handlers, long before the CLI has finished importing."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.action.support_runner import ENTRYPOINT, pull_request_event, runner_env, write_tiny_project
from tests.github.support_fake_api import FakeGitHub
from tests.hostile.support_hostile import environment, op_table, write_project

pytestmark = pytest.mark.slow

OPS = """
def scale(x):
    return x.copy()

def ref(x):
    return x
"""
SIGNALS = [(signal.SIGINT, 130), (signal.SIGTERM, 143)]
# The program as a shell starts it: `python -m gpuemu_ci` and the console script's entry point.
PROGRAMS = {
    "python -m gpuemu_ci": [sys.executable, "-m", "gpuemu_ci"],
    "console script": [
        sys.executable,
        "-c",
        "import sys; from gpuemu_ci.cli.entry import main; sys.exit(main())",
    ],
}


def catches_sigterm(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(mask & (1 << (signal.SIGTERM - 1)))


def signalled_at_start(argv: list[str], sig: int, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Start `argv`, send `sig` as soon as it catches SIGTERM, and wait for it."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)  # type: ignore[call-overload]
    try:
        while not catches_sigterm(process.pid) and process.poll() is None:
            time.sleep(0.001)
        process.send_signal(sig)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


@pytest.mark.parametrize("program", PROGRAMS.values(), ids=PROGRAMS.keys())
@pytest.mark.parametrize(("sig", "code"), SIGNALS, ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_the_run_starts_writes_that_no_case_ran(
    tmp_path: Path, program: list[str], sig: signal.Signals, code: int
) -> None:
    config = write_project(tmp_path, OPS, [op_table("scale", "ops:scale")], iterations=50)
    done = signalled_at_start(
        [*program, "run", "--no-lint", "--config", str(config), "--out", str(tmp_path / "out")],
        sig, cwd=tmp_path, env=environment(tmp_path),
    )  # fmt: skip
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr
    assert f"interrupted by {sig.name}" in done.stderr
    document = json.loads((tmp_path / "out" / "results.json").read_text())
    assert document["verdict"] == "incomplete" and document["cut_short"]
    assert any(f"interrupted by {sig.name}" in note for note in document["notes"])
    (op,) = document["ops"]
    assert op["cases_total"] == 0
    assert op["message"] == f"no case ran (the run was interrupted by {sig.name} first)"


@pytest.mark.parametrize(("sig", "code"), SIGNALS, ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_another_command_starts_exits_cleanly(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    done = signalled_at_start(
        [sys.executable, "-m", "gpuemu_ci", "render", "comment", "missing.json"],
        sig, cwd=tmp_path, env=environment(tmp_path),
    )  # fmt: skip
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr
    assert ("interrupted" if sig == signal.SIGINT else "terminated") in done.stderr


@pytest.mark.slow
def test_sigterm_while_the_action_starts_publishes_that_no_case_ran(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    """The runner cancels the step while the Action is still starting (it re-executes itself on the way)."""
    workspace = write_tiny_project(tmp_path / "ws")
    pr = fake_github.add_pull(head_sha="1" * 40, base_sha="2" * 40)
    event = pull_request_event(fake_github, pr, head_sha="1" * 40, base_sha="2" * 40)
    env = runner_env(
        fake_github, workspace, "pull_request", event, sha="3" * 40, ref=f"refs/pull/{pr}/merge",
        inputs={"mode": "gate", "baseline": "none"},
    )  # fmt: skip
    done = signalled_at_start([sys.executable, str(ENTRYPOINT)], signal.SIGTERM, cwd=workspace, env=env)
    assert done.returncode == 143, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    document = json.loads((workspace / "gpuemu-out" / "results.json").read_text())
    assert document["verdict"] == "incomplete"
    assert all(op["cases_total"] == 0 for op in document["ops"])
    assert any("interrupted by SIGTERM" in note for note in document["notes"]), document["notes"]
    (comment,) = fake_github.comments(pr)
    assert "interrupted by SIGTERM" in comment["body"]
