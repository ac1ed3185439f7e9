"""results.json <-> `Results`: the one reader and writer of results documents.

A document read from a file may come from a fork's artifact, so it is untrusted: `from_json` validates it
once, completely, against the model, and a bad document is a UsageError (exit 2) naming the JSON path of the
first bad field (``$.ops[3].failures[0].case_seed``). Afterwards the object is trusted everywhere.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from gpuemu_ci.errors import UsageError
from gpuemu_ci.files import atomic_write, read_bounded
from gpuemu_ci.results.model import SCHEMA_VERSION, Results

RESULTS_NAME = "results.json"


def encode_extra(value: Any) -> Any:
    """JSON for the values kwargs and case metadata hold besides JSON's own: NumPy scalars and arrays, paths."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


_ENCODER = msgspec.json.Encoder(enc_hook=encode_extra)
_DECODER = msgspec.json.Decoder(Results)


def to_json(results: Results) -> bytes:
    """The document as indented JSON (UTF-8, a trailing newline)."""
    return msgspec.json.format(_ENCODER.encode(results), indent=2) + b"\n"


def to_builtins(results: Results) -> dict[str, Any]:
    """The document as plain dicts and lists (what `json.loads(to_json(...))` gives)."""
    data: dict[str, Any] = msgspec.json.decode(_ENCODER.encode(results))
    return data


def from_json(
    data: bytes | str, *, source: str = "the results document", quote_values: bool = True
) -> Results:
    """A validated `Results`; a UsageError naming `source` and the first bad field otherwise. `quote_values`
    False: the message names where the document is wrong but quotes nothing of it (a value, a key, a version),
    for a message that is published (a baseline's, in a pull request's comment)."""
    _check_utf8(data, source)
    try:
        version = msgspec.json.decode(data, type=_Version).schema_version
    except (msgspec.DecodeError, RecursionError) as exc:
        raise UsageError(f"{source} is not a gpuemu-ci results document: {_why(exc, quote_values)}") from None
    if version != SCHEMA_VERSION:
        # A version number is safe to repeat; anything else a document puts there is only its own.
        number = isinstance(version, int) or (
            isinstance(version, str) and version.isdigit() and len(version) < 9
        )
        shown = repr(version) if quote_values or number else "another"
        raise UsageError(
            f"{source} has results schema version {shown}; this gpuemu-ci reads version {SCHEMA_VERSION}"
            " (re-run the suite, or use the gpuemu-ci that wrote it)"
        )
    try:
        return _DECODER.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise UsageError(
            f"{source} is not a valid gpuemu-ci results document: {_why(exc, quote_values)}"
        ) from None


def read_results(path: Path, what: str = "results file", *, quote_values: bool = True) -> Results:
    """Reads and validates a results.json (bounded: a huge file, a FIFO or a device is refused)."""
    return from_json(read_bounded(Path(path), what), source=str(path), quote_values=quote_values)


def write_results(out_dir: Path, results: Results) -> Path:
    """Writes `out_dir/results.json` atomically; returns its path."""
    path = out_dir / RESULTS_NAME
    atomic_write(path, to_json(results))
    return path


def _check_utf8(data: bytes | str, source: str) -> None:
    """JSON is UTF-8: a file that is not is refused naming the first bad byte (msgspec would raise a bare
    UnicodeDecodeError counted from the start of the string it was reading)."""
    if isinstance(data, str):
        return
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{source} is not a gpuemu-ci results document: not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None


class _Version(msgspec.Struct):
    schema_version: str | int | None = None


def _why(exc: BaseException, quote_values: bool = True) -> str:
    if isinstance(exc, RecursionError):
        return "it is nested too deeply"
    text = str(exc)
    if isinstance(exc, msgspec.ValidationError) and " - at `" not in text:
        text += " - at `$`"
    if isinstance(exc, msgspec.DecodeError) and not isinstance(exc, msgspec.ValidationError):
        return f"not JSON ({text})"
    return text if quote_values else _without_values(text)


# msgspec quotes what it refused in some messages (an enum value, an unknown key; our own checks may quote a
# value too); those that name only the schema's types, bounds and fields are safe. The path after " - at " is
# built from the schema's field names and indices.
_AT = re.compile(r" - at `[^`]*`$")
_SCHEMA_ONLY = ("Expected `", "Object missing required field `")


def _without_values(text: str) -> str:
    """A validation message with nothing of the document quoted: what kind of problem, and where."""
    at = _AT.search(text)
    where = at.group(0) if at else ""
    head = text[: at.start()] if at else text
    if head.startswith(_SCHEMA_ONLY):
        return text
    if head.startswith("Invalid enum value"):
        return f"Invalid enum value{where}"
    if head.startswith("Object contains unknown field"):
        return f"Object contains an unknown field{where}"
    return f"Invalid value{where}"
