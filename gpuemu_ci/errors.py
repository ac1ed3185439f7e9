"""One error hierarchy; the CLI maps each class to its exit code in one place."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes shared by every command (DESIGN.md "Exit codes")."""

    PASSED = 0
    GATE_FAILED = 1
    USAGE = 2
    INFRASTRUCTURE = 3


class GpuemuError(Exception):
    """Base class: a message meant for a person, and the exit code it implies."""

    exit_code: ExitCode = ExitCode.INFRASTRUCTURE

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def diagnostics(self) -> str:
        return self.message


class ConfigError(GpuemuError):
    """The configuration or the command line is wrong: exit 2."""

    exit_code = ExitCode.USAGE

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line else f"{path}: "
        super().__init__(where + message)
        self.path = path
        self.line = line


class UsageError(GpuemuError):
    """A command was called wrongly (bad flag value, missing file): exit 2."""

    exit_code = ExitCode.USAGE


class InfraError(GpuemuError):
    """The gate could not run (missing tool, nothing executed, every case crashed): exit 3."""

    exit_code = ExitCode.INFRASTRUCTURE
