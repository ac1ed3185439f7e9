"""The one way tests run the `gpuemu-ci` command in-process: `main([...])` with its output captured, exactly
as a user's shell would see it (the single error handler included). The `cli` fixture in conftest.py wraps it."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuemu_ci.cli.main import main


@dataclass(frozen=True)
class CliResult:
    """What a shell would see: the exit code, stdout and stderr."""

    code: int
    stdout: str
    stderr: str

    @property
    def exit_code(self) -> int:
        return self.code

    @property
    def output(self) -> str:
        """stdout then stderr, as a terminal shows them."""
        return self.stdout + self.stderr


def run_cli(
    args: Sequence[str | Path], *, cwd: Path | None = None, env: Mapping[str, str | None] | None = None
) -> CliResult:
    """`gpuemu-ci ARGS` in this process; `env` sets (or, with None, removes) variables for the call."""
    out, err = _stream(), _stream()
    with _environment(env or {}), _cwd(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    assert "Traceback" not in err.getvalue(), err.getvalue()
    return CliResult(code, out.getvalue(), err.getvalue())


class _Text(io.TextIOWrapper):
    def getvalue(self) -> str:
        self.flush()
        buffer = self.buffer
        assert isinstance(buffer, io.BytesIO)
        return buffer.getvalue().decode("utf-8")


def _stream() -> _Text:
    # A text stream with a binary `.buffer`, as sys.stdout has: commands write bytes there (results.json).
    return _Text(io.BytesIO(), encoding="utf-8", write_through=True)


@contextlib.contextmanager
def _environment(changes: Mapping[str, str | None]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in changes}
    try:
        for name, value in changes.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _cwd(path: Path | None) -> Iterator[None]:
    if path is None:
        yield
        return
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


__all__ = ["CliResult", "run_cli"]
