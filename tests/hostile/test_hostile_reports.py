"""Signed reports against a hostile results file (issue #14, item 14): `sign` does not vouch for a commit the CI
run is not about, and `verify` prints a report's strings inert. Real keys, real files, the one CLI harness."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gpuemu_ci.render.escape import terminal_text
from tests.support_cli import CliResult, run_cli


def invoke(args: list[str], env: dict[str, str] | None = None) -> CliResult:
    clean: dict[str, str | None] = {name: None for name in os.environ if name.startswith("GITHUB_")}
    clean.update(env or {})
    return run_cli(args, env=clean)


@pytest.fixture
def key(tmp_path: Path) -> tuple[Path, Path]:
    assert invoke(["keygen", "-o", str(tmp_path / "k")]).exit_code == 0
    return tmp_path / "k", tmp_path / "k.pub"


def ci_env(tmp_path: Path, sha: str, event: dict[str, Any]) -> dict[str, str]:
    path = tmp_path / "event.json"
    path.write_text(json.dumps(event))
    return {
        "GITHUB_REPOSITORY": "octo/kernels",
        "GITHUB_SHA": sha,
        "GITHUB_EVENT_NAME": "push",
        "GITHUB_EVENT_PATH": str(path),
        "GITHUB_RUN_ID": "77",
    }


def test_sign_refuses_results_of_a_commit_the_ci_run_is_not_about(
    tmp_path: Path, key: tuple[Path, Path], sample: Any
) -> None:
    results = tmp_path / "results.json"
    document = sample.results()
    document["run"] = {"repo": "octo/kernels", "commit": sample.commit}  # what the file claims it tested
    results.write_text(json.dumps(document))
    out = tmp_path / "report.json"
    env = ci_env(tmp_path, sample.other_commit, {"after": sample.other_commit})
    refused = invoke(["sign", str(results), "--key", str(key[0]), "-o", str(out)], env)
    assert refused.exit_code == 2, refused.output
    assert sample.commit in refused.stderr and sample.other_commit in refused.stderr and not out.exists()
    # The same file in the run that did test that commit (a PR run: its head), or with --commit: signed.
    pr_env = ci_env(tmp_path, "f" * 40, {"pull_request": {"number": 3, "head": {"sha": sample.commit}}})
    assert invoke(["sign", str(results), "--key", str(key[0]), "-o", str(out)], pr_env).exit_code == 0
    forced = invoke(
        ["sign", str(results), "--key", str(key[0]), "-o", str(out), "--commit", sample.commit], env
    )
    assert forced.exit_code == 0, forced.output


@pytest.mark.parametrize(
    "forged",
    [
        "gate\nverdict:   passed",
        "gate\rsignature: valid, key trusted",
        "gate\x1b[2K\x1b[1Averdict:   passed",
        "gate\u2028verdict:   passed",
        "gate\u202edessap :tcidrev",
    ],
)
def test_verify_prints_a_reports_strings_escaped(
    tmp_path: Path, key: tuple[Path, Path], sample: Any, forged: str
) -> None:
    """A run field with a newline (or a carriage return, a cursor movement, a line separator, a bidi override)
    must not print a line that reads like verify's own."""
    document = sample.results(verdict="failed")
    document["run"] = {"repo": "octo/kernels", "commit": sample.commit, "job": forged, "event": forged}
    results = tmp_path / "results.json"
    results.write_text(json.dumps(document))
    report = tmp_path / "report.json"
    signed = invoke(["sign", str(results), "--key", str(key[0]), "-o", str(report)])
    assert signed.exit_code == 0, signed.output
    result = invoke(["verify", str(report), "--key", str(key[1])])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line for line in lines if line.startswith("verdict:")] == ["verdict:   failed"]
    assert next(line for line in lines if line.startswith("signature:")).startswith("signature: valid, key ")
    assert not any(ch in result.stdout for ch in "\r\x1b\u2028\u202e")
    assert terminal_text(forged) in result.stdout  # shown, as escapes
