"""The Action's secrets (the GitHub token, the signing key): taken out of the environment before anything else
happens, and never again in an environment block, a command line or a file.

Removing a variable from `os.environ` does not remove it from `/proc/<pid>/environ`, which shows the
environment the process was started with. So the entrypoint hands the secrets to a fresh image of itself
through a pipe and `execve`s with the secrets removed (`reexec_without_secrets`); the new image reads them
back (`receive`) and from then on holds them only in memory, which `sandbox.harden_self` makes unreadable to
every other process. Code under test runs only in children that never held them (`sandbox`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field

from gpuemu_ci import early_signals
from gpuemu_ci.errors import UsageError
from gpuemu_ci.launch import python_env

SECRETS_FD_VARIABLE = "GPUEMU_ACTION_SECRETS_FD"
# The inputs that hold secrets (both spellings the runner may use), and variables a workflow or the runner
# sets that grant access to something: the runtime tokens let a step write caches and artifacts.
SECRET_INPUTS = ("github_token", "signing_key")
SECRET_VARIABLES = (
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "ACTIONS_RUNTIME_TOKEN",
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
    "ACTIONS_ID_TOKEN_REQUEST_URL",
    "GPUEMU_SIGNING_KEY",
)
_MAX_SECRETS_BYTES = 32 << 10  # a token and a PEM key are a few hundred bytes; a pipe holds 64 KiB


@dataclass(frozen=True)
class Secrets:
    """What the Action holds in memory only. Never printed (no repr of the values)."""

    token: str = field(default="", repr=False)
    signing_key: str = field(default="", repr=False)

    def values(self) -> tuple[str, ...]:
        """The secret values that are set, to keep out of code under test's reach and out of logs."""
        return tuple(v for v in (self.token, self.signing_key) if v)


def secret_input_keys(name: str) -> tuple[str, str]:
    """The two spellings of an input's variable: INPUT_SIGNING_KEY and INPUT_SIGNING-KEY."""
    upper = name.upper()
    return f"INPUT_{upper}", f"INPUT_{upper.replace('_', '-')}"


def take_secrets(env: Mapping[str, str]) -> Secrets:
    """The secrets the runner passed: the inputs (underscore spelling first), else GITHUB_TOKEN."""

    def first(*keys: str) -> str:
        return next((env[k] for k in keys if env.get(k, "").strip()), "")

    token = first(*secret_input_keys("github_token"), "GITHUB_TOKEN").strip()
    key = first(*secret_input_keys("signing_key"))
    return Secrets(token=token, signing_key=key)


def without_secrets(env: Mapping[str, str], secrets: Secrets) -> dict[str, str]:
    """`env` without the secret inputs, the secret variables, and any variable whose value holds a secret (a
    workflow may pass the token under a name of its own)."""
    removed = {key for name in SECRET_INPUTS for key in secret_input_keys(name)} | set(SECRET_VARIABLES)
    values = secrets.values()
    return {
        k: v for k, v in env.items() if k not in removed and not any(value in v for value in values if value)
    }


def reexec_without_secrets(environ: MutableMapping[str, str], argv: list[str]) -> None:
    """Start this program again (same pid) with the secrets removed from its environment block; they travel
    through a pipe that the new image reads at once. Does not return. Nothing to do without secrets."""
    secrets = take_secrets(environ)
    data = json.dumps({"token": secrets.token, "signing_key": secrets.signing_key}).encode()
    if len(data) > _MAX_SECRETS_BYTES:
        raise UsageError(
            f"the github_token and signing_key inputs hold {len(data):,} bytes together; more than the "
            f"{_MAX_SECRETS_BYTES:,} a token and a key can take"
        )
    clean = python_env(without_secrets(environ, secrets))
    read_end, write_end = os.pipe()
    os.write(write_end, data)
    os.close(write_end)
    os.set_inheritable(read_end, True)
    clean[SECRETS_FD_VARIABLE] = str(read_end)
    early_signals.carry(clean)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *argv], clean)


def receive(environ: MutableMapping[str, str]) -> Secrets:
    """In the re-executed image: read the secrets from the pipe named in the environment and close it."""
    fd_text = environ.pop(SECRETS_FD_VARIABLE, "")
    if not fd_text.isdigit():
        return Secrets()
    fd = int(fd_text)
    chunks = []
    try:
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    data = json.loads(b"".join(chunks) or b"{}")
    return Secrets(token=str(data.get("token", "")), signing_key=str(data.get("signing_key", "")))


def reexecuted(environ: Mapping[str, str]) -> bool:
    """Whether this process is the re-executed image (it must not re-exec again)."""
    return SECRETS_FD_VARIABLE in environ
