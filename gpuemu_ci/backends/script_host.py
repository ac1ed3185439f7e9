"""A reference (or op) script kept warm: `python -m gpuemu_ci.backends.script_host ROOT SPEC [FUNCTION...]`.

Imports SPEC once (a script path relative to ROOT, or "pkg.mod:function"), then answers requests for as long as
its stdin stays open: each line is upstream's request JSON (backends/script_protocol.py), each answer one line
of upstream's output JSON, or `{"error": "..."}` when the function raised (the host stays up). Whatever the user
code prints goes to stderr, so that stdout carries only answers. It runs as a child of the worker that started
it: same user, same confinement, killed with the worker's process group.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def _load(root: Path, spec: str, names: list[str]) -> Any:
    from gpuemu_ci.backends.loaded import LoadError
    from gpuemu_ci.backends.loading import load_callable, load_script_function

    try:
        if ":" in spec and not spec.partition(":")[0].endswith(".py"):
            return load_callable(spec, root)
        return load_script_function(root, spec, tuple(names) or ("reference",))
    except LoadError as exc:
        raise SystemExit(f"gpuemu-ci script host: {exc}") from None


def main(argv: list[str]) -> int:
    """`python -m gpuemu_ci.backends.script_host ROOT SPEC [FUNCTION...]`: hosts a script-based op or
    reference in its own process; answers go to stdout, the user's prints to stderr. Exit 2 on bad
    arguments."""
    if len(argv) < 2:
        print("usage: python -m gpuemu_ci.backends.script_host ROOT SPEC [FUNCTION...]", file=sys.stderr)
        return 2
    answers = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # the user's prints go to stderr; stdout carries answers only
    sys.stdout = sys.stderr
    root = Path(argv[0])
    os.chdir(root)
    function = _load(root, argv[1], argv[2:])

    from gpuemu_ci.backends.frameworks import BadOutput, to_numpy_outputs
    from gpuemu_ci.backends.loading import describe_exception
    from gpuemu_ci.backends.script_protocol import ProtocolError, decode_inputs, encode_reply

    for line in sys.stdin.buffer:
        try:
            inputs, kwargs = decode_inputs(json.loads(line))
            reply = encode_reply(to_numpy_outputs(function(inputs, **kwargs)))
        except (ProtocolError, BadOutput, json.JSONDecodeError) as exc:
            reply = json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode()
        except Exception as exc:  # the reference raised: report it, stay warm for the next case
            reply = json.dumps({"error": describe_exception(exc)}).encode()
        answers.write(reply + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
