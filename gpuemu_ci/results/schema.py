"""The JSON Schema of results.json (version 1) and validation against it.

The schema ships inside the package (``gpuemu_ci/schemas/results.schema.json``, JSON Schema draft
2020-12) and is the contract for everything that reads a results document: the renderers, the
signer, baselines, and people's own scripts. Validating needs the ``jsonschema`` package, which
is a test dependency, not a runtime one; it is imported only when `validate_results` is called.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from gpuemu_ci.errors import InfraError, UsageError

SCHEMA_RESOURCE = "results.schema.json"
MAX_REPORTED_ERRORS = 5


@functools.cache
def _schema_text() -> str:
    return resources.files("gpuemu_ci").joinpath("schemas", SCHEMA_RESOURCE).read_text(encoding="utf-8")


def load_schema() -> dict[str, Any]:
    """The results schema as a fresh dict (callers may change their copy)."""
    schema: dict[str, Any] = json.loads(_schema_text())
    return schema


def validate_results(document: Any, *, source: str = "results document") -> None:
    """Check ``document`` (a decoded results.json) against the schema.

    Raises UsageError (exit 2) listing the first errors, each with the path of the offending field;
    InfraError (exit 3) when the ``jsonschema`` package is not installed.
    """
    try:
        import jsonschema
    except ImportError:
        raise InfraError(
            "validating a results document needs the jsonschema package, which gpuemu-ci does not "
            "install by default: pip install 'gpuemu-ci[test]' (or pip install jsonschema)"
        ) from None
    validator = jsonschema.Draft202012Validator(load_schema())
    errors = sorted(
        validator.iter_errors(document), key=lambda e: (list(map(str, e.absolute_path)), e.message)
    )
    if not errors:
        return
    lines = [
        f"  - {_where(error.absolute_path)}: {_short(error.message)}"
        for error in errors[:MAX_REPORTED_ERRORS]
    ]
    more = len(errors) - len(lines)
    if more:
        lines.append(f"  - ... and {more} more")
    raise UsageError(f"{source} does not match the results schema (version 1):\n" + "\n".join(lines))


def _where(path: Any) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(the document)"


def _short(message: str, limit: int = 300) -> str:
    # jsonschema quotes the whole offending value; a large object would drown the message.
    return message if len(message) <= limit else message[: limit - 1] + "…"
