"""The Action's image, run as GitHub's runner runs a Docker container action (support_docker.py), against the
fake GitHub API on 127.0.0.1: what a user sees from each mode of the Action, from the real image.

Skipped unless GPUEMU_CONTAINER_IMAGE names a built image (.ci/container builds it and sets it). The
scenarios are those of tests/action/test_entrypoint.py, which runs the entrypoint as a host process; here the
interpreter, the dependencies, the lint toolchain, the file ownership and the signals are the image's.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import textwrap
import time
from pathlib import Path

from tests.action.support_runner import (
    BUGGY_SCALE,
    TINY_CONFIG,
    Step,
    pull_request_event,
    push_event,
    schedule_event,
    write_tiny_project,
)
from tests.action.test_entrypoint_setup import LOCAL_PACKAGE
from tests.container.support_docker import (
    RUNNER_UID,
    Job,
    PreparedStep,
    finish,
    in_image,
    needs_image,
    prepare_step,
    run_step,
    start,
)
from tests.github.support_fake_api import FakeGitHub

pytestmark = needs_image

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def sha(label: str) -> str:
    return hashlib.sha1(label.encode()).hexdigest()


HEAD, BASE, MERGE = sha("pr head"), sha("main at the PR's base"), sha("merge commit")
# The `with:` blocks of the workflow templates (gpuemu_ci/templates/workflows).
PR_TEMPLATE = {"mode": "gate", "config": "gpuemu.toml", "suite": "quick", "baseline": "auto"}
BASELINE_TEMPLATE = {"mode": "baseline", "config": "gpuemu.toml", "suite": "quick"}
NIGHTLY_TEMPLATE = {"mode": "nightly", "config": "gpuemu.toml", "suite": "thorough", "baseline": "none"}


def gate_step(
    fake: FakeGitHub,
    job: Job,
    pr: int,
    *,
    run_id: int = 9001,
    workspace_owner: int = RUNNER_UID,
    **inputs: str,
) -> PreparedStep:
    """The PR template's gate step on pull request ``pr``, with ``inputs`` on top of the template's."""
    event = pull_request_event(fake, pr, head_sha=HEAD, base_sha=BASE)
    return prepare_step(job, fake, "pull_request", event, sha=MERGE, ref=f"refs/pull/{pr}/merge",
                        inputs={**PR_TEMPLATE, **inputs}, run_id=run_id,
                        workspace_owner=workspace_owner)  # fmt: skip


def ok(step: Step, code: int = 0) -> Step:
    assert step.returncode == code, step.describe()
    assert "Traceback" not in step.stderr and "internal error" not in step.stdout, step.describe()
    return step


def owners(root: Path) -> set[tuple[int, int]]:
    return {(p.lstat().st_uid, p.lstat().st_gid) for p in [root, *root.rglob("*")]}


def copy_example(name: str, workspace: Path) -> Path:
    shutil.copytree(
        EXAMPLES / name, workspace, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__")
    )
    return workspace


# --- what the image holds -----------------------------------------------------------------------------------


def test_the_image_runs_the_installed_compiled_package_and_keeps_no_build_leftovers() -> None:
    probe = in_image(
        "python3",
        "-c",
        textwrap.dedent("""
        import json, pathlib, sys, sysconfig
        sys.path.insert(0, "/action")  # what running /action/entrypoint.py puts first
        import gpuemu_ci, numpy
        stdlib, site = (pathlib.Path(sysconfig.get_path(k)) for k in ("stdlib", "purelib"))
        print(json.dumps({
            "action": sorted(p.name for p in pathlib.Path("/action").iterdir()),
            "gpuemu_ci": gpuemu_ci.__file__, "numpy": numpy.__file__,
            "stdlib_pyc": sum(1 for _ in stdlib.glob("__pycache__/*.cpython-312.pyc")),
            "package_pyc": sum(1 for _ in (site / "gpuemu_ci").rglob("*.cpython-312.pyc")),
            "version": sys.version_info[:2],
        }))
        """),
    )
    assert probe.returncode == 0, probe.stderr
    facts = json.loads(probe.stdout)
    assert facts["action"] == ["README.md", "entrypoint.py", "pyproject.toml", "requirements"]
    assert facts["gpuemu_ci"].endswith("/site-packages/gpuemu_ci/__init__.py")
    assert facts["stdlib_pyc"] > 100 and facts["package_pyc"] > 50  # compiled at build time, on purpose
    assert facts["version"] == [3, 12]


# --- gate on a pull request ---------------------------------------------------------------------------------


def test_the_quickstart_gate_passes_with_one_sticky_comment(fake_github: FakeGitHub, tmp_path: Path) -> None:
    job = Job(tmp_path)
    copy_example("quickstart", job.workspace)
    pr = fake_github.add_pull(head_sha=HEAD, base_sha=BASE)

    first = ok(run_step(gate_step(fake_github, job, pr, run_id=101)))
    assert first.outputs["verdict"] == "passed"
    assert first.outputs["ops_failed"] == "0" and int(first.outputs["ops_passed"]) >= 6
    assert first.outputs["results_path"] == "gpuemu-out/results.json"
    assert "passed" in first.summary.lower() and "softmax" in first.summary
    (comment,) = fake_github.comments(pr)
    assert first.outputs["comment_url"] == comment["html_url"] and "actions/runs/101" in comment["body"]
    out = job.workspace / "gpuemu-out"
    assert {p.name for p in out.iterdir()} >= {
        "results.json",
        "report.dsse.json",
        "results.sarif",
        "junit.xml",
    }
    assert owners(out) == {(RUNNER_UID, RUNNER_UID)}  # the runner's later steps (upload) can read and delete

    second = ok(run_step(gate_step(fake_github, job, pr, run_id=102)))
    (updated,) = fake_github.comments(pr)
    assert updated["id"] == comment["id"] and second.outputs["comment_url"] == comment["html_url"]
    assert "actions/runs/102" in updated["body"] and "actions/runs/101" not in updated["body"]


def test_the_buggy_example_fails_the_gate_with_annotations_and_replay_lines(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    job = Job(tmp_path)
    copy_example("buggy", job.workspace)
    pr = fake_github.add_pull(head_sha=HEAD, base_sha=BASE)
    step = ok(run_step(gate_step(fake_github, job, pr)), 1)
    assert step.outputs["verdict"] == "failed" and int(step.outputs["ops_failed"]) >= 1
    errors = [c for c in step.commands if c.name == "error"]
    softmax = next(c for c in errors if "softmax" in c.props.get("title", ""))
    assert softmax.props["file"] == "gpuemu.toml" and int(softmax.props["line"]) > 0
    (comment,) = fake_github.comments(pr)
    assert "softmax" in comment["body"] and "gpuemu-ci replay" in comment["body"]
    assert owners(job.workspace / "gpuemu-out") == {(RUNNER_UID, RUNNER_UID)}


# --- baseline on main, then a gate diffed against its artifact ----------------------------------------------


def test_baseline_mode_then_a_gate_against_its_artifact_shows_the_regression(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    main = Job(tmp_path / "main")
    write_tiny_project(main.workspace)
    event = push_event(fake_github, before=sha("main before"), after=BASE)
    produced = ok(run_step(prepare_step(main, fake_github, "push", event, sha=BASE, ref="refs/heads/main",
                                        inputs=BASELINE_TEMPLATE)))  # fmt: skip
    assert produced.outputs["verdict"] == "passed"
    out = main.workspace / "gpuemu-out"
    files = {name: (out / name).read_bytes() for name in ("baseline.json", "results.json")}
    assert json.loads(files["results.json"])["run"]["commit"] == BASE

    # What the baseline workflow uploads as `gpuemu-baseline`, served by the fake API as an artifact.
    fake_github.add_artifact(fake_github.add_run(event="push", head_branch="main", head_sha=BASE),
                             "gpuemu-baseline", files)  # fmt: skip
    pr = fake_github.add_pull(head_sha=HEAD, base_sha=BASE)
    head = Job(tmp_path / "pr")
    write_tiny_project(head.workspace, BUGGY_SCALE)
    regressed = ok(run_step(gate_step(fake_github, head, pr)), 1)
    diff = json.loads((head.workspace / regressed.outputs["results_path"]).read_text())["diff"]
    assert diff["status"] == "compared" and diff["baseline"]["provenance"]["match"] == "exact"
    assert int(regressed.outputs["regressions"]) >= 1
    (comment,) = fake_github.comments(pr)
    assert "scale" in comment["body"] and "regress" in comment["body"].lower()


# --- nightly ------------------------------------------------------------------------------------------------


def test_nightly_opens_one_issue_per_failing_op_and_reuses_it(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    job = Job(tmp_path)
    write_tiny_project(job.workspace, BUGGY_SCALE)

    def nightly(run_id: int) -> Step:
        return run_step(prepare_step(job, fake_github, "schedule", schedule_event(), sha=BASE,
                                     ref="refs/heads/main", inputs=NIGHTLY_TEMPLATE, run_id=run_id))  # fmt: skip

    ok(nightly(201), 1)
    (issue,) = fake_github.issues()
    assert issue["state"] == "open" and "scale" in issue["title"] and "actions/runs/201" in issue["body"]
    ok(nightly(202), 1)
    (same,) = fake_github.issues()
    assert same["number"] == issue["number"] and "actions/runs/202" in same["body"]


# --- the setup input ----------------------------------------------------------------------------------------


def test_setup_installs_a_local_package_as_the_runner_user(fake_github: FakeGitHub, tmp_path: Path) -> None:
    job = Job(tmp_path)
    for name, text in LOCAL_PACKAGE.items():
        path = job.workspace / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    pr = fake_github.add_pull(head_sha=HEAD, base_sha=BASE)
    setup = "pip install --no-index --no-build-isolation ./vendor/helperlib -e ."
    step = ok(run_step(gate_step(fake_github, job, pr, baseline="none", setup=setup)))
    assert step.outputs["verdict"] == "passed", step.describe()
    assert "gpuemu-ci setup: create the virtual environment" in step.stdout
    venv = job.workspace / ".gpuemu-cache" / "venv"
    assert list(venv.glob("lib/python3.12/site-packages/helperlib*"))
    assert owners(venv) == {(RUNNER_UID, RUNNER_UID)}  # installed by the runner's user, not by root


# --- a workspace owned by root ------------------------------------------------------------------------------

PROBE_OPS = """\
import os, numpy as np

def _writable(path):
    try:
        with open(path, "a"):
            return "yes"
    except OSError as error:
        return type(error).__name__

def scale(x):
    import gpuemu_ci
    facts = {"uid": os.getuid(), "euid": os.geteuid(), "entrypoint": _writable("/action/entrypoint.py"),
             "package": _writable(gpuemu_ci.__file__)}
    raise RuntimeError("probe " + " ".join(f"{k}={v}" for k, v in facts.items()))

def scale_ref(x):
    return x * 2.0

def rowsum(x):
    return x.astype(np.float32).sum(axis=-1).astype(x.dtype)

def rowsum_ref(x):
    return x.sum(axis=-1)
"""


def test_code_under_test_in_a_root_owned_workspace_is_not_root_and_cannot_write_the_tool(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    """The Action runs as root in the container; the ops it imports must not (a root-owned workspace is what
    a self-hosted runner running as root gives)."""
    job = Job(tmp_path)
    write_tiny_project(job.workspace, PROBE_OPS)
    pr = fake_github.add_pull(head_sha=HEAD, base_sha=BASE)
    step = run_step(gate_step(fake_github, job, pr, baseline="none", workspace_owner=0))
    assert step.returncode == 1, step.describe()  # the probe op errors; the gate fails and says why
    text = (job.workspace / "gpuemu-out" / "results.json").read_text()
    match = re.search(r"probe uid=(\d+) euid=(\d+) entrypoint=(\w+) package=(\w+)", text)
    assert match, step.describe()
    uid, euid, entrypoint, package = match.groups()
    assert uid != "0" and euid != "0"
    assert entrypoint != "yes" and package != "yes"


# --- docker stop --------------------------------------------------------------------------------------------

SLOW_OPS = """\
import pathlib, time
import numpy as np

def scale(x):
    with pathlib.Path("calls").open("a") as calls:  # the test waits for the first calls
        calls.write("1")
    time.sleep(0.5)
    return (x.astype(np.float32) * np.float32(2)).astype(x.dtype)

def scale_ref(x):
    return x * 2.0
"""


def test_docker_stop_publishes_the_partial_results(fake_github: FakeGitHub, tmp_path: Path) -> None:
    """`docker stop` (what the runner does to a container step it cancels) sends SIGTERM to the entrypoint,
    which is PID 1: the cases judged so far are published, marked cut short, the step's verdict is
    incomplete, and it exits by itself with the documented code (143 with issue #26, 3 before it; never
    137, which would mean PID 1 ignored the signal and was killed)."""
    job = Job(tmp_path)
    one_slow_op = TINY_CONFIG.split("[[ops]]")[:2]
    config = "[[ops]]".join(one_slow_op).replace("quick_iterations = 2", "quick_iterations = 60")
    write_tiny_project(job.workspace, SLOW_OPS, config)
    pr = fake_github.add_pull(head_sha=HEAD, base_sha=BASE)
    prepared = gate_step(fake_github, job, pr, baseline="none")
    process = start(prepared)
    calls = job.workspace / "calls"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        if calls.exists() and len(calls.read_text()) >= 6:
            break
        time.sleep(0.5)
    assert process.poll() is None, "the run ended before it could be stopped"
    stopped = subprocess.run(["docker", "stop", "--time", "60", prepared.name], capture_output=True,
                             text=True, env=prepared.env, timeout=120, check=False)  # fmt: skip
    step = finish(prepared, process)
    assert stopped.returncode == 0, stopped.stderr
    assert step.returncode == 143, step.describe()  # SIGTERM, after publishing the partial results
    assert any("SIGTERM" in message for message in step.messages("warning")), step.describe()
    results = json.loads((job.workspace / "gpuemu-out" / "results.json").read_text())
    assert results["cut_short"] is True
    assert 0 < results["summary"]["cases_total"] < 60, results["summary"]
    assert step.outputs["verdict"] == results["verdict"] == "incomplete", step.describe()
    assert owners(job.workspace / "gpuemu-out") == {(RUNNER_UID, RUNNER_UID)}
