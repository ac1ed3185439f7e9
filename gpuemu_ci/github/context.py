"""The run's identity, read once from the environment the runner gives a Docker action.

``ActionContext.from_env(env)`` takes a mapping (``os.environ`` in the entrypoint, a dict in
tests) and reads:

- ``GITHUB_*`` variables: repository, SHAs, refs, run id/attempt, server and API URLs;
- ``INPUT_*`` action inputs. The runner keeps hyphens (``INPUT_FAIL-ON-REGRESSION``), which
  some shells drop, so both spellings are accepted and ``_`` wins when both are set;
- the event payload at ``GITHUB_EVENT_PATH`` for ``pull_request`` (same repository or fork),
  ``push``, ``schedule``, ``workflow_dispatch`` and ``workflow_run``.

No network access here. ``base_ref``/``base_sha`` name what this run compares against: the
pull request's base, the pushed branch and the commit before the push, or the branch of a
scheduled run (newest baseline, no commit preference).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import MappingProxyType
from typing import Any

from gpuemu_ci.errors import UsageError

DEFAULT_SERVER_URL = "https://github.com"
DEFAULT_API_URL = "https://api.github.com"
_ZERO_SHA = "0" * 40
_TRUE = frozenset({"true", "True", "TRUE"})
_FALSE = frozenset({"false", "False", "FALSE"})


class EventKind(Enum):
    """The events gpuemu-ci knows how to handle; anything else is ``OTHER``."""

    PULL_REQUEST = "pull_request"
    PULL_REQUEST_TARGET = "pull_request_target"
    PUSH = "push"
    SCHEDULE = "schedule"
    WORKFLOW_DISPATCH = "workflow_dispatch"
    WORKFLOW_RUN = "workflow_run"
    OTHER = "other"

    @classmethod
    def from_name(cls, name: str) -> EventKind:
        """The kind of ``GITHUB_EVENT_NAME``; ``OTHER`` for events not listed."""
        try:
            return cls(name)
        except ValueError:
            return cls.OTHER


@dataclass(frozen=True)
class TriggeringRun:
    """For ``workflow_run`` events: the run whose completion started this one.

    ``pr_numbers`` comes from ``workflow_run.pull_requests``, which GitHub leaves empty for pull
    requests from forks; ``comments.resolve_pull_request`` then asks the API.
    """

    id: int
    event: str
    conclusion: str | None
    head_sha: str
    head_branch: str | None
    head_repository: str | None
    pr_numbers: tuple[int, ...]


@dataclass(frozen=True)
class RunVariables:
    """The run's identity from the plain ``GITHUB_*`` variables, as given (None when unset); numeric ids are
    checked. What a signing job or a tool outside Actions can read without an event payload."""

    repository: str | None
    repository_id: int | None
    sha: str | None
    ref: str | None
    event_name: str | None
    event_path: str | None
    run_id: int | None
    run_attempt: int | None
    job: str | None
    server_url: str | None
    api_url: str | None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RunVariables:
        """The run's variables from `env` (os.environ in the Action); unset or blank ones are None. Raises
        UsageError for a numeric variable (run id, attempt, repository id) that is not a number."""

        def text(name: str) -> str | None:
            return env.get(name, "").strip() or None

        def number(name: str) -> int | None:
            value = text(name)
            if value is not None and not value.isdigit():
                raise UsageError(f"environment variable {name}={value!r} is not a number")
            return None if value is None else int(value)

        return cls(
            repository=text("GITHUB_REPOSITORY"),
            repository_id=number("GITHUB_REPOSITORY_ID"),
            sha=text("GITHUB_SHA"),
            ref=text("GITHUB_REF"),
            event_name=text("GITHUB_EVENT_NAME"),
            event_path=text("GITHUB_EVENT_PATH"),
            run_id=number("GITHUB_RUN_ID"),
            run_attempt=number("GITHUB_RUN_ATTEMPT"),
            job=text("GITHUB_JOB"),
            server_url=text("GITHUB_SERVER_URL"),
            api_url=text("GITHUB_API_URL"),
        )


@dataclass(frozen=True)
class ActionContext:
    """Everything gpuemu-ci needs to know about the workflow run it is part of."""

    repository: str
    event_name: str
    event: EventKind
    sha: str
    ref: str
    server_url: str
    api_url: str
    repository_id: int | None = None
    run_id: int | None = None
    run_attempt: int = 1
    job: str = ""
    workflow: str = ""
    workflow_ref: str = ""
    actor: str = ""
    workspace: Path | None = None
    default_branch: str | None = None
    pr_number: int | None = None
    base_ref: str | None = None
    base_sha: str | None = None
    head_ref: str | None = None
    head_sha: str | None = None
    head_repository: str | None = None
    is_fork: bool = False
    triggering_run: TriggeringRun | None = None
    token: str = field(default="", repr=False)
    inputs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), repr=False, hash=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ActionContext:
        """Build the context from an environment mapping; raise ``UsageError`` if it is unusable."""
        variables = RunVariables.from_env(env)
        repository = variables.repository or ""
        if not repository:
            raise UsageError(
                "GITHUB_REPOSITORY is not set: run this inside GitHub Actions, or set the GITHUB_* "
                "variables it needs (GITHUB_REPOSITORY, GITHUB_EVENT_NAME, GITHUB_EVENT_PATH, GITHUB_SHA)"
            )
        if repository.count("/") != 1 or "" in repository.split("/"):
            raise UsageError(f"GITHUB_REPOSITORY={repository!r} is not of the form owner/name")
        inputs = read_inputs(env)
        payload = load_event(variables.event_path)
        event_name = variables.event_name or ""
        repo_payload = _obj(payload, "repository")
        fields: dict[str, Any] = {
            "repository": repository,
            "event_name": event_name,
            "event": EventKind.from_name(event_name),
            "sha": variables.sha or "",
            "ref": variables.ref or "",
            "server_url": variables.server_url or DEFAULT_SERVER_URL,
            "api_url": variables.api_url or DEFAULT_API_URL,
            "repository_id": variables.repository_id or _int(repo_payload.get("id")),
            "run_id": variables.run_id,
            "run_attempt": variables.run_attempt or 1,
            "job": variables.job or "",
            "workflow": env.get("GITHUB_WORKFLOW", ""),
            "workflow_ref": env.get("GITHUB_WORKFLOW_REF", ""),
            "actor": env.get("GITHUB_ACTOR", ""),
            "workspace": Path(env["GITHUB_WORKSPACE"]) if env.get("GITHUB_WORKSPACE") else None,
            "default_branch": _str(repo_payload.get("default_branch")),
            "token": inputs.get("github_token") or env.get("GITHUB_TOKEN", ""),
            "inputs": MappingProxyType(dict(inputs)),
        }
        fields.update(_event_fields(fields["event"], payload, env, repository))
        return cls(**fields)

    # -- derived facts ----------------------------------------------------------------------

    @property
    def owner(self) -> str:
        """The account part of ``owner/name``."""
        return self.repository.split("/", 1)[0]

    @property
    def name(self) -> str:
        """The repository part of ``owner/name``."""
        return self.repository.split("/", 1)[1]

    @property
    def is_pull_request(self) -> bool:
        """True for ``pull_request`` and ``pull_request_target`` events."""
        return self.event in (EventKind.PULL_REQUEST, EventKind.PULL_REQUEST_TARGET)

    @property
    def run_url(self) -> str | None:
        """The run's page, for links in comments and reports."""
        if self.run_id is None:
            return None
        return f"{self.server_url.rstrip('/')}/{self.repository}/actions/runs/{self.run_id}"

    @property
    def token_is_read_only(self) -> bool:
        """True where GitHub caps the token at read: pull requests from forks and Dependabot."""
        return (self.event is EventKind.PULL_REQUEST and self.is_fork) or self.actor == "dependabot[bot]"

    # -- inputs -----------------------------------------------------------------------------

    def input(self, name: str, default: str | None = None) -> str | None:
        """An action input by its id (``fail_on_regression`` or ``fail-on-regression``).

        Surrounding whitespace is removed; an empty value counts as not given, as in the toolkit.
        """
        value = self.inputs.get(_input_key(name), "").strip()
        return value if value else default

    def input_bool(self, name: str, default: bool) -> bool:
        """A boolean input: ``true``/``True``/``TRUE`` or ``false``/``False``/``FALSE`` (YAML core)."""
        value = self.input(name)
        if value is None:
            return default
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        raise UsageError(f"input {name!r} must be true or false, got {value!r}")


def read_inputs(env: Mapping[str, str]) -> dict[str, str]:
    """All ``INPUT_*`` variables keyed by lower-case id with ``_`` for ``-``."""
    inputs: dict[str, str] = {}
    hyphenated: dict[str, str] = {}
    for key, value in env.items():
        if key.startswith("INPUT_") and len(key) > len("INPUT_"):
            name = _input_key(key[len("INPUT_") :])
            (hyphenated if "-" in key else inputs)[name] = value
    # The underscore spelling wins: it is the one action.yml declares.
    return {**hyphenated, **inputs}


def _input_key(name: str) -> str:
    return name.strip().replace(" ", "_").replace("-", "_").lower()


def load_event(path: str | None, *, missing_ok: bool = False) -> dict[str, Any]:
    """The webhook payload at GITHUB_EVENT_PATH ({} when there is none; `missing_ok`: also when the file is
    gone); a UsageError when it cannot be read or is not a JSON object."""
    if not path:
        return {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        if missing_ok:
            return {}
        raise UsageError(f"cannot read the event payload GITHUB_EVENT_PATH={path}: {exc.strerror}") from exc
    except OSError as exc:
        raise UsageError(f"cannot read the event payload GITHUB_EVENT_PATH={path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"the event payload GITHUB_EVENT_PATH={path} is not UTF-8 ({exc.reason} at byte {exc.start})"
        ) from None
    try:
        payload = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"the event payload GITHUB_EVENT_PATH={path} is not valid JSON: {exc}") from None
    except RecursionError:
        raise UsageError(f"the event payload GITHUB_EVENT_PATH={path} is nested too deeply") from None
    if not isinstance(payload, dict):
        raise UsageError(f"the event payload GITHUB_EVENT_PATH={path} is not a JSON object")
    return payload


def _event_fields(
    event: EventKind, payload: Mapping[str, Any], env: Mapping[str, str], repository: str
) -> dict[str, Any]:
    if event in (EventKind.PULL_REQUEST, EventKind.PULL_REQUEST_TARGET):
        return _pull_request_fields(payload, env, repository)
    if event is EventKind.PUSH:
        ref = _str(payload.get("ref")) or env.get("GITHUB_REF", "")
        before = _str(payload.get("before"))
        return {
            "base_ref": _branch(ref),
            "base_sha": before if before and before != _ZERO_SHA else None,
            "head_ref": _branch(ref),
            "head_sha": _str(payload.get("after")) or env.get("GITHUB_SHA") or None,
            "head_repository": repository,
        }
    if event is EventKind.WORKFLOW_RUN:
        return _workflow_run_fields(payload, repository)
    # schedule, workflow_dispatch and others: compare with the newest baseline of the branch.
    branch = env.get("GITHUB_REF_NAME") or _branch(env.get("GITHUB_REF", ""))
    return {
        "base_ref": branch or None,
        "head_ref": branch or None,
        "head_sha": env.get("GITHUB_SHA") or None,
        "head_repository": repository,
    }


def _pull_request_fields(
    payload: Mapping[str, Any], env: Mapping[str, str], repository: str
) -> dict[str, Any]:
    pr = _obj(payload, "pull_request")
    base, head = _obj(pr, "base"), _obj(pr, "head")
    base_repo = _str(_obj(base, "repo").get("full_name")) or repository
    # A deleted fork leaves head.repo null: treat it as a fork, never as trusted.
    head_repo = _str(_obj(head, "repo").get("full_name"))
    return {
        "pr_number": _int(payload.get("number")) or _int(pr.get("number")),
        "base_ref": _str(base.get("ref")) or env.get("GITHUB_BASE_REF") or None,
        "base_sha": _str(base.get("sha")),
        "head_ref": _str(head.get("ref")) or env.get("GITHUB_HEAD_REF") or None,
        "head_sha": _str(head.get("sha")),
        "head_repository": head_repo,
        "is_fork": head_repo is None or head_repo.lower() != base_repo.lower(),
    }


def _workflow_run_fields(payload: Mapping[str, Any], repository: str) -> dict[str, Any]:
    run = _obj(payload, "workflow_run")
    run_id = _int(run.get("id"))
    if run_id is None:
        return {}
    prs = [p for p in run.get("pull_requests") or [] if isinstance(p, dict)]
    numbers = tuple(n for n in (_int(p.get("number")) for p in prs) if n is not None)
    head_repo = _str(_obj(run, "head_repository").get("full_name"))
    first = prs[0] if prs else {}
    triggering = TriggeringRun(
        id=run_id,
        event=_str(run.get("event")) or "",
        conclusion=_str(run.get("conclusion")),
        head_sha=_str(run.get("head_sha")) or "",
        head_branch=_str(run.get("head_branch")),
        head_repository=head_repo,
        pr_numbers=numbers,
    )
    return {
        "triggering_run": triggering,
        "pr_number": numbers[0] if numbers else None,
        "base_ref": _str(_obj(first, "base").get("ref")),
        "base_sha": _str(_obj(first, "base").get("sha")),
        "head_ref": triggering.head_branch,
        "head_sha": triggering.head_sha or None,
        "head_repository": head_repo,
        "is_fork": head_repo is None or head_repo.lower() != repository.lower(),
    }


def _obj(mapping: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = mapping.get(key)
    return value if isinstance(value, dict) else {}


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _branch(ref: str) -> str | None:
    return ref.removeprefix("refs/heads/") if ref.startswith("refs/heads/") else None
