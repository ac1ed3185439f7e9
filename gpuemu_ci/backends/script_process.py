"""A script run as upstream gpuemu runs its reference scripts: a subprocess, the case as JSON on stdin, the
output as JSON on stdout (script_protocol.py, byte for byte upstream's format).

- Cold (a script that only reads stdin): `python SCRIPT` per call, as upstream does, stdin closed after the
  request; a non-zero exit is the call's error, with the script's stderr.
- Warm (a script that defines its function, or "pkg.mod:function"): one `script_host` process, started at the
  first call and reused by every later one, one request and one answer per line.
The subprocess is a child of the worker: it runs as the worker does (same user, environment and confinement),
in the worker's process group, so that a timeout or an abort that kills the worker kills it too. It is started
with this interpreter (`sys.executable`), so it sees the packages the op sees.
"""

from __future__ import annotations

import atexit
import contextlib
import subprocess
import sys
from typing import IO, Any

import numpy as np

from gpuemu_ci.backends.interface import CallTarget
from gpuemu_ci.backends.loaded import Loaded, LoadError
from gpuemu_ci.backends.script_protocol import ProtocolError, decode_reply, encode_request

STDERR_TAIL = 2000  # characters of a failed script's stderr kept in the message


class ScriptFailed(Exception):
    """The script exited non-zero, or its output does not parse; the message says which and why."""


def load_script_process(target: CallTarget) -> Loaded:
    """The callable that runs `target` in a script process (one kept warm, or one per call); LoadError when
    the script is not there."""
    path = target.spec.partition(":")[0]
    is_file = path.endswith(".py") or "/" in path
    if is_file and not (target.root / path).is_file():
        raise LoadError(f"script not found: {target.root / path}")
    runner: _Warm | _Cold = _Warm(target) if target.warm else _Cold(target)
    mode = "kept warm" if target.warm else "one process per call"
    return Loaded(runner.call, f"{target.spec} (subprocess, upstream's JSON protocol, {mode})")


def _arrays(inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    return {name: np.asarray(value) for name, value in inputs.items()}


class _Cold:
    def __init__(self, target: CallTarget) -> None:
        self.target = target

    def call(self, inputs: dict[str, Any], kwargs: dict[str, Any]) -> tuple[np.ndarray, ...]:
        request = encode_request(_arrays(inputs), kwargs)
        done = subprocess.run(
            [sys.executable, self.target.spec],
            input=request,
            capture_output=True,
            cwd=self.target.root,
            check=False,
        )
        stderr = done.stderr.decode("utf-8", "replace")[-STDERR_TAIL:].rstrip()
        if done.returncode != 0:
            raise ScriptFailed(
                f"{self.target.spec} exited with code {done.returncode}" + (f":\n{stderr}" if stderr else "")
            )
        try:
            return decode_reply(done.stdout)
        except ProtocolError as exc:
            raise ScriptFailed(
                f"{self.target.spec}: {exc}" + (f"\nstderr:\n{stderr}" if stderr else "")
            ) from None


class _Warm:
    """One host process; started again if it died (the next call then pays the import once more)."""

    def __init__(self, target: CallTarget) -> None:
        self.target = target
        self.process: subprocess.Popen[bytes] | None = None
        atexit.register(self.close)

    def _start(self) -> subprocess.Popen[bytes]:
        functions = [self.target.function] if self.target.function else []
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpuemu_ci.backends.script_host",
                str(self.target.root),
                self.target.spec,
                *functions,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=self.target.root,
        )

    def call(self, inputs: dict[str, Any], kwargs: dict[str, Any]) -> tuple[np.ndarray, ...]:
        if self.process is None or self.process.poll() is not None:
            self.process = self._start()
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write(encode_request(_arrays(inputs), kwargs) + b"\n")
            stdin.flush()
            line = stdout.readline()
        except BrokenPipeError:
            line = b""
        if not line:
            code = self.process.wait()
            self.process = None
            raise ScriptFailed(
                f"{self.target.spec}: the reference process exited with code {code} (its stderr is in the "
                "worker's log below)"
            )
        try:
            return decode_reply(line)
        except ProtocolError as exc:
            raise ScriptFailed(f"{self.target.spec}: {exc}") from None

    def close(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        for stream in (process.stdin, process.stdout):
            _close(stream)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _close(stream: IO[bytes] | None) -> None:
    if stream is not None:
        with contextlib.suppress(OSError):
            stream.close()
