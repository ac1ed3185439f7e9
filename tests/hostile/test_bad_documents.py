"""Issue 26, items 5 and 6: a results.json that is not UTF-8, and a gpuemu.toml (or user defaults file) whose
value nests arrays thousands deep, are bad user input: every command that reads one exits 2 with a message
naming the file and where in it, never exit 3 with "internal error" and never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuemu_ci.attest import keys
from tests.action.support_runner import pull_request_event, run_step, runner_env, write_tiny_project
from tests.github.support_fake_api import FakeGitHub
from tests.hostile.support_hostile import environment, op_table, write_project
from tests.support_reports import results_document

pytestmark = pytest.mark.slow

NOT_UTF8 = b'{"schema_version":"\xf9"}'  # 0xf9 at byte 19 starts no UTF-8 sequence
BAD_BYTE = 19
OPS = """
def scale(x):
    return x.copy()

def ref(x):
    return x
"""


def gpuemu(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuemu_ci", *args],
        cwd=cwd, env=environment(cwd), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def assert_clean_usage_error(done: subprocess.CompletedProcess[str], *names: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    for name in names:
        assert name in done.stderr, done.stderr


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    config = write_project(tmp_path, OPS, [op_table("scale", "ops:scale")], iterations=2)
    config.write_text(config.read_text().replace("[ci]\n", '[ci]\ncorpus = "gpuemu-corpus"\n'))
    (tmp_path / "bad.json").write_bytes(NOT_UTF8)
    (tmp_path / "good.json").write_text(json.dumps(results_document()))
    keys.write_keypair(tmp_path / "signing.key", keys.generate())
    return tmp_path


# Every command that reads a results document, with the bad one where it reads it.
COMMANDS = {
    "render comment": ["render", "comment", "bad.json"],
    "render summary": ["render", "summary", "bad.json"],
    "render sarif": ["render", "sarif", "bad.json"],
    "render junit": ["render", "junit", "bad.json"],
    "render html": ["render", "html", "bad.json"],
    "render annotations": ["render", "annotations", "bad.json"],
    "diff (current)": ["diff", "bad.json", "good.json"],
    "diff (baseline)": ["diff", "good.json", "bad.json"],
    "merge": ["merge", "good.json", "bad.json", "--output", "merged.json"],
    "replay": ["replay", "bad.json"],
    "sign": ["sign", "bad.json", "--key", "signing.key"],
    "baseline create": ["baseline", "create", "--from", "bad.json", "--output", "baseline.json"],
    "corpus add": ["corpus", "add", "bad.json"],
}


@pytest.mark.parametrize("args", COMMANDS.values(), ids=COMMANDS.keys())
def test_a_results_file_that_is_not_utf8_is_a_usage_error_naming_file_and_byte(
    workspace: Path, args: list[str]
) -> None:
    done = gpuemu(workspace, *args)
    assert_clean_usage_error(done, "bad.json", f"at byte {BAD_BYTE}", "not UTF-8")


def test_a_baseline_that_is_not_utf8_is_reported_unreadable_and_the_gate_still_judges(
    workspace: Path,
) -> None:
    """A bad baseline is never fatal (the README's Baselines section): the run's own verdict stands, and the
    diff says which file could not be used and where it went wrong."""
    done = gpuemu(workspace, "run", "--no-lint", "--baseline", "bad.json", "--out", "out")
    assert done.returncode == 0, done.stderr
    assert "baseline unreadable" in done.stderr and f"at byte {BAD_BYTE}" in done.stderr, done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    assert json.loads((workspace / "out" / "results.json").read_text())["verdict"] == "passed"


@pytest.mark.parametrize("mode", ["comment", "sign"])
def test_the_actions_modes_that_read_results_refuse_one_that_is_not_utf8(
    fake_github: FakeGitHub, tmp_path: Path, mode: str
) -> None:
    workspace = write_tiny_project(tmp_path / "ws")
    (workspace / "bad.json").write_bytes(NOT_UTF8)
    pr = fake_github.add_pull(head_sha="a" * 40, base_sha="b" * 40)
    event = pull_request_event(fake_github, pr, head_sha="a" * 40, base_sha="b" * 40)
    inputs = {"mode": mode, "results": "bad.json"}
    if mode == "sign":
        inputs["signing_key"] = keys.generate().private_pem().decode()
    env = runner_env(
        fake_github,
        workspace,
        "pull_request",
        event,
        sha="c" * 40,
        ref=f"refs/pull/{pr}/merge",
        inputs=inputs,
    )
    step = run_step(env)
    assert step.returncode == 2, step.describe()
    (error,) = step.messages("error")
    assert "bad.json" in error and f"at byte {BAD_BYTE}" in error and "internal error" not in error
    assert "Traceback" not in step.stderr


def nested(depth: int, open_: str = "[", close: str = "]") -> str:
    return open_ * depth + close * depth


@pytest.mark.parametrize(
    "value", [nested(5000), "[" * 2500 + "{a = " * 2500 + "1" + "}" * 2500 + "]" * 2500],
    ids=["arrays", "arrays and inline tables"],
)  # fmt: skip
def test_a_config_value_nested_thousands_deep_is_a_config_error_naming_its_line(
    workspace: Path, value: str
) -> None:
    config = workspace / "gpuemu.toml"
    text = config.read_text().replace("seed = 3", f"# a comment with [[[ brackets\nseed = {value}")
    config.write_text(text)
    line = text.splitlines().index(f"seed = {value}") + 1
    done = gpuemu(workspace, "run", "--no-lint", "--config", "gpuemu.toml", "--out", "out")
    assert_clean_usage_error(done, f"gpuemu.toml:{line}:", "5,000 deep")
    assert not (workspace / "out" / "results.json").exists()


def test_user_defaults_nested_thousands_deep_are_a_config_error_naming_their_line(workspace: Path) -> None:
    defaults = workspace / "defaults.toml"
    defaults.write_text('[ci]\ncase_timeout = 10\nquick_dtypes = """ [[[ not a bracket """\n'
                        f"quick_iterations = {nested(5000)}\n")  # fmt: skip
    env = environment(workspace, GPUEMU_USER_CONFIG=str(defaults))
    done = subprocess.run(
        [sys.executable, "-m", "gpuemu_ci", "run", "--no-lint", "--out", "out"],
        cwd=workspace, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert_clean_usage_error(done, "defaults.toml:4:", "5,000 deep")


@pytest.mark.parametrize("kind", ["results", "report"])
def test_json_documents_nested_thousands_deep_are_refused_cleanly(workspace: Path, kind: str) -> None:
    """The other recursive readers: a results.json and a signed report (DSSE envelope)."""
    deep = b'{"schema_version": 2, "ops": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    (workspace / "deep.json").write_bytes(deep)
    if kind == "results":
        done = gpuemu(workspace, "render", "comment", "deep.json")
        assert_clean_usage_error(done, "deep.json")
    else:
        keys.write_keypair(workspace / "verifying.key", keys.generate())
        done = gpuemu(workspace, "verify", "deep.json", "--key", "verifying.key.pub")
        assert done.returncode == 3, done.stderr  # verify's documented code for malformed input
        assert "nested too deeply" in done.stderr and "internal error" not in done.stderr


@pytest.mark.parametrize(
    "payload", [b'{"after": "\xf9"}', b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"]
)
def test_an_event_payload_not_utf8_or_nested_thousands_deep_is_a_usage_error(
    fake_github: FakeGitHub, tmp_path: Path, payload: bytes
) -> None:
    workspace = write_tiny_project(tmp_path / "ws")
    pr = fake_github.add_pull(head_sha="a" * 40, base_sha="b" * 40)
    event = pull_request_event(fake_github, pr, head_sha="a" * 40, base_sha="b" * 40)
    env = runner_env(
        fake_github, workspace, "pull_request", event, sha="c" * 40, ref=f"refs/pull/{pr}/merge",
        inputs={"mode": "gate", "baseline": "none"},
    )  # fmt: skip
    Path(env["GITHUB_EVENT_PATH"]).write_bytes(payload)
    step = run_step(env)
    assert step.returncode == 2, step.describe()
    (error,) = step.messages("error")
    assert "GITHUB_EVENT_PATH" in error and "internal error" not in error and "Traceback" not in step.stderr
