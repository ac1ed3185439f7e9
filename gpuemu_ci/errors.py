"""One error hierarchy; the CLI maps each class to its exit code in one place."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes shared by every command (README "Exit codes", docs/cli.md): 0 passed, 1 the gate failed (a
    validation, lint or regression failure), 2 a usage or config error, 3 an infrastructure error (could not run,
    or ran less than it was asked to: a skip, a timeout, nothing executed)."""

    PASSED = 0
    GATE_FAILED = 1
    USAGE = 2
    INFRASTRUCTURE = 3


class GpuemuError(Exception):
    """Base class: a message meant for a person, and the exit code it implies. `cli.main` prints it and
    returns its code; nothing else catches it to print."""

    exit_code: int = ExitCode.INFRASTRUCTURE

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def diagnostics(self) -> str:
        """What `cli.main` prints after `gpuemu-ci: error:`; the message, unless a subclass adds detail."""
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


REPORT_BUG = "this is a bug in gpuemu-ci: please report it at https://github.com/gpuemu/gpuemu-ci/issues"


# Why the two sides of a case can build different inputs, and what to do about it.
INPUTS_NOT_FROM_SEED = (
    "Inputs must be a function of the seed alone; an inputs hook that draws its own randomness (or reads the "
    f"time, the process or the machine) does this. If the op has no such hook, {REPORT_BUG} with this message "
    "and the gpuemu.toml."
)


def inputs_differ_message(case: str, seed: int, op_digest: str, judge_digest: str) -> str:
    """One case whose two sides built different inputs from its seed: no verdict about it is possible."""
    return (
        f"case {case} (seed {seed}): the op's worker built inputs with digest {op_digest} and the judge's worker "
        f"built inputs with digest {judge_digest} from the same seed, so no verdict is possible. "
        + INPUTS_NOT_FROM_SEED
    )


class InputsDiffer(InfraError):
    """The op's worker and the judge's built different inputs for one case (their digests differ): the tool's
    own error, never a verdict about the op. Exit 3 (`replay` and `calibrate`, which run one op; in a run the
    case is that op's error, and the run goes on)."""

    def __init__(self, case: str, seed: int, op_digest: str, judge_digest: str) -> None:
        super().__init__("internal error: " + inputs_differ_message(case, seed, op_digest, judge_digest))
        self.case = case
        self.op_digest = op_digest
        self.judge_digest = judge_digest


class AlreadyReported(GpuemuError):
    """A child process (the Action's confined gate run) ended with an error it has printed itself: exit with its
    code and print nothing more."""

    def __init__(self, exit_code: int) -> None:
        super().__init__(f"exit status {exit_code}")
        self.exit_code = exit_code


class Interrupted(GpuemuError):
    """SIGINT or SIGTERM stopped the run: 130 (128 + SIGINT) or 143 (128 + SIGTERM), as shells report it."""

    def __init__(self, message: str, signal_number: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signal_number


class VerifyFailed(GpuemuError):
    """`gpuemu-ci verify` did not accept the report; each subclass carries verify's own exit code."""


class BadSignature(VerifyFailed):
    """Wrong key, altered envelope, or an unsigned report: exit 1."""

    exit_code = 1


class ExpectationNotMet(VerifyFailed):
    """A valid signature over claims that do not match what was required (repo, commit, age, ...): exit 2."""

    exit_code = 2


class MalformedReport(VerifyFailed):
    """The report or a public key cannot be read as one: exit 3."""

    exit_code = 3
