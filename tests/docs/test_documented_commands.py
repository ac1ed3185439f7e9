"""Every `gpuemu-ci` command the README and the documentation pages show in a shell block is run here, as
written, in the situation the page describes (issue #27: the README's `sign ... --key` example exited 2). A
new command in the docs fails `test_every_documented_command_is_run_or_justified` until it is given a scenario
below or a reason in SKIPPED. Placeholders (`<SEED>`, `<sha>`) are filled with what the earlier commands of
the same block produced; nothing else of a command is changed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL_BLOCK = re.compile(r"```(bash|sh|shell|console)\n(.*?)```", re.S)

# Commands not run here, and why (each is run for real elsewhere).
SKIPPED = {
    "gpuemu-ci run --shard 1/4 --out shard-1": "tests/action/test_workflow_sharded.py runs the four shards",
    "gpuemu-ci merge shard-*/results.json -o gpuemu-out/results.json --baseline baseline.json --config "
    "gpuemu.toml": "tests/action/test_workflow_sharded.py and tests/cli/test_merge.py merge real shards",
    "gpuemu-ci corpus add gpuemu-captures/snapshots/77b92822dcf2a049.npz": "needs a shadow checker's capture; "
    "tests/shadow pins real captures",
    # The pages' transcripts (`console` blocks): tests/docs/test_transcripts.py runs each as written and checks
    # the lines the page shows are what it prints.
    "gpuemu-ci run --config examples/torch/gpuemu.toml": "tests/docs/test_transcripts.py",
    "gpuemu-ci run --config examples/torch/gpuemu-buggy.toml": "tests/docs/test_transcripts.py",
    "gpuemu-ci replay --config examples/torch/gpuemu-buggy.toml --op swiglu --seed 2390463972292089408": (
        "tests/docs/test_transcripts.py"
    ),
    "gpuemu-ci run --config examples/triton/gpuemu.toml": "tests/docs/test_transcripts.py",
    "gpuemu-ci run --config examples/triton/gpuemu-buggy.toml": "tests/docs/test_transcripts.py",
    "gpuemu-ci replay --config examples/triton/gpuemu-buggy.toml --op rmsnorm --seed 13601593922034885672": (
        "tests/docs/test_transcripts.py"
    ),
    "gpuemu-ci run --config examples/cuda/gpuemu.toml": "tests/docs/test_transcripts.py",
    # docs/onboarding.md's steps, run as the page writes them in a copy of the library they onboard.
    "gpuemu-ci add acme_kernels.rmsnorm:rms_norm --family norm -- python demo.py": (
        "tests/onboard/test_onboarding_page.py"
    ),
    "gpuemu-ci run --op rms_norm": "tests/onboard/test_onboarding_page.py",
    "gpuemu-ci add acme_kernels.rmsnorm:rms_norm --family norm --calls gpuemu-calls.jsonl": (
        "tests/onboard/test_onboarding_page.py"
    ),
    "gpuemu-ci run --config examples/cuda/gpuemu.toml --allow-skips": "tests/examples/test_framework_examples.py",
    # The HIP example needs the HIP toolchain (clang for AMD GPUs): tests/lint/test_hip_real.py runs both where
    # it is installed (.ci/run installs it).
    "gpuemu-ci lint --config examples/hip/gpuemu.toml": "tests/lint/test_hip_real.py (example_lint)",
    "gpuemu-ci lint --config examples/hip/gpuemu-regcap.toml": "tests/lint/test_hip_real.py",
    # Mutation testing runs a suite per mutant: tests/mutate runs the command on its own Triton project.
    "gpuemu-ci mutate --config examples/triton/gpuemu.toml": "tests/mutate/test_mutate_command.py",
    "gpuemu-ci mutate --op rmsnorm --max-mutants 20 --seed 7 --jobs 4": "tests/mutate/test_mutate_command.py",
}


def documented_commands() -> list[tuple[str, str]]:
    """(page, command) of every line of a shell block that runs gpuemu-ci, continuation lines joined and
    trailing comments dropped."""
    found = []
    for page in PAGES:
        for language, block in SHELL_BLOCK.findall(page.read_text(encoding="utf-8")):
            for line in block.replace("\\\n", " ").splitlines():
                if language == "console":  # a transcript: the commands are the lines after the prompt
                    if not line.startswith("$ "):
                        continue
                    line = line[2:]
                command = _without_comment(line).strip()
                if re.search(r"(^|&& )gpuemu-ci ", command):
                    found.append((page.relative_to(REPO).as_posix(), re.sub(r"\s+", " ", command)))
    return found


def _without_comment(line: str) -> str:
    return re.sub(r"\s+#\s.*$", "", line)


@dataclass(frozen=True)
class Scenario:
    """Where a block's commands run (a copy of `examples/` in a git clone of a GitHub repository, or an empty
    one), and the exit code the page promises for each."""

    commands: tuple[tuple[str, int], ...]
    workspace: str = "examples"  # "examples": cwd holds examples/; "quickstart": cwd is the quickstart itself
    # "empty": a new repository


SCENARIOS = {
    "quick start": Scenario(
        (
            ("python3 -m pip install -e . && gpuemu-ci run --config examples/quickstart/gpuemu.toml", 0),
            ("gpuemu-ci run --config examples/quickstart/gpuemu.toml", 0),
        )
    ),
    "catch a bug, replay and minimize it": Scenario(
        (
            ("gpuemu-ci run --config examples/buggy/gpuemu.toml", 1),
            ("gpuemu-ci replay --config examples/buggy/gpuemu.toml --op softmax --seed <SEED>", 1),
            (
                "gpuemu-ci minimize --config examples/buggy/gpuemu.toml --op softmax --seed <SEED>",
                1,
            ),  # still fails
        )
    ),
    "init in a new repository": Scenario((("gpuemu-ci init", 0), ("gpuemu-ci run", 0)), workspace="empty"),
    "sign a run and verify the report": Scenario(
        (
            ("gpuemu-ci run", 0),
            ("gpuemu-ci keygen -o gpuemu.key", 0),
            ("gpuemu-ci sign gpuemu-out/results.json --key gpuemu.key -o report.dsse.json", 0),
            (
                "gpuemu-ci verify report.dsse.json --key gpuemu.key.pub --repo owner/name --commit <sha> "
                "--max-age 7d --artifact gpuemu.toml --require-verdict passed",
                0,
            ),
        ),
        workspace="quickstart",
    ),
    "pin failures in the corpus and list them": Scenario(
        (
            ("gpuemu-ci run", 1),
            ("gpuemu-ci corpus add gpuemu-out/results.json", 0),
            ("gpuemu-ci corpus list", 0),
        ),
        workspace="buggy with a corpus",
    ),
}
# Commands a scenario runs that are set-up, not documented in a shell block (the `gpuemu-ci run` before
# `sign`, or before `corpus add`).
SETUP = {"gpuemu-ci run"}


def test_every_documented_command_is_run_or_justified() -> None:
    documented = documented_commands()
    assert len(documented) >= 10, documented  # the extraction finds the pages' commands
    covered = {command for scenario in SCENARIOS.values() for command, _ in scenario.commands}
    missing = [(page, c) for page, c in documented if c not in covered and c not in SKIPPED]
    assert missing == [], "documented commands that no test runs (add a scenario, or a reason to SKIPPED)"
    stale = [c for c in covered | set(SKIPPED) if c not in {c for _, c in documented} and c not in SETUP]
    assert stale == [], "scenario or skipped commands the pages no longer show"


def _git(cwd: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com")
    env.update(GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _workspace(kind: str, tmp_path: Path) -> Path:
    """A clone of `owner/name` on GitHub (its origin), committed, holding what the scenario needs."""
    root = tmp_path / "clone"
    ignore = shutil.ignore_patterns("gpuemu-out", "__pycache__", "gpuemu-corpus")
    if kind == "examples":
        shutil.copytree(REPO / "examples", root / "examples", ignore=ignore)
    elif kind == "quickstart":
        shutil.copytree(REPO / "examples" / "quickstart", root, ignore=ignore)
    elif kind == "buggy with a corpus":
        shutil.copytree(REPO / "examples" / "buggy", root, ignore=ignore)
        config = root / "gpuemu.toml"
        config.write_text(config.read_text().replace("[ci]\n", '[ci]\ncorpus = "gpuemu-corpus"\n', 1))
    else:
        root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    _git(root, "remote", "add", "origin", "https://github.com/owner/name.git")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "--allow-empty", "-m", "the user's code")
    return root


def _filled(command: str, cwd: Path) -> str:
    """Placeholders filled from what the block's earlier commands left: the first failure's seed, HEAD."""
    if "<SEED>" in command:
        results = json.loads((cwd / "gpuemu-out" / "results.json").read_text())
        seed = next(
            f["case_seed"] for op in results["ops"] if op["name"] == "softmax" for f in op["failures"]
        )
        command = command.replace("<SEED>", str(seed))
    return command.replace("<sha>", _git(cwd, "rev-parse", "HEAD"))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_documented_commands_run_as_written(name: str, tmp_path: Path) -> None:
    scenario = SCENARIOS[name]
    cwd = _workspace(scenario.workspace, tmp_path)
    # `gpuemu-ci` is this checkout's, as after `pip install -e .`; the install step itself is .ci/run's (it
    # runs the README's commands in a fresh virtual environment).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gpuemu-ci").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gpuemu_ci "$@"\n')
    (bin_dir / "gpuemu-ci").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", GPUEMU_USER_CONFIG="none")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    for key in [k for k in env if k.startswith("GITHUB_")]:
        del env[key]  # a local run, as the pages show it, not one inside CI
    for command, expected in scenario.commands:
        runnable = command.split(" && ", 1)[1] if command.startswith("python3 -m pip install") else command
        done = subprocess.run(
            ["bash", "-c", _filled(runnable, cwd)],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == expected, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
