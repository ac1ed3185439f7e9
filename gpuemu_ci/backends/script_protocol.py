"""Upstream gpuemu's reference-script protocol: one JSON object in, one out, tensors as base64.

In (the script's stdin): `{"inputs": {name: {"shape": [...], "strides": [...], "dtype": "float32", "data":
"<base64>"}}, "kwargs": {name: "<string>"}}`: data is the C-order bytes (little-endian), strides are in
elements, kwargs are strings as upstream sends them (booleans as "true"/"false"). Out (its stdout):
`{"shape": [...], "dtype": "...", "data": "<base64>"}` (C-order bytes; strides, when given, are not read).
gpuemu-ci also accepts `{"outputs": [tensor, ...]}` for an op with several outputs. Dtype names are upstream's
(`float16`, `bfloat16`, `float32`, `float64`, `int8` ... `uint64`, `bool`) and their short forms (`f32`).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from gpuemu_ci import dtypes

MAX_REPLY_BYTES = 1 << 30  # a reply larger than this is refused before it is decoded


class ProtocolError(Exception):
    """The script's output is not a tensor in upstream's JSON format; the message says what is wrong."""


def encode_tensor(array: np.ndarray) -> dict[str, Any]:
    """An array as the script protocol's `{shape, strides, dtype, data}` object (contiguous,
    little-endian)."""
    contiguous = np.ascontiguousarray(array)
    little = contiguous.astype(contiguous.dtype.newbyteorder("<"), copy=False)
    return {
        "shape": list(contiguous.shape),
        "strides": [s // contiguous.itemsize for s in contiguous.strides] if contiguous.itemsize else [],
        "dtype": dtypes.name_of(contiguous.dtype),
        "data": base64.b64encode(little.tobytes()).decode("ascii"),
    }


def kwarg_text(value: Any) -> str:
    """A kwarg as upstream hands it to a script: a string (booleans as TOML writes them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def encode_request(inputs: Mapping[str, np.ndarray], kwargs: Mapping[str, Any]) -> bytes:
    """The JSON a script reads on stdin (one line, no newline inside)."""
    message = {
        "inputs": {name: encode_tensor(np.asarray(array)) for name, array in inputs.items()},
        "kwargs": {name: kwarg_text(value) for name, value in kwargs.items()},
    }
    return json.dumps(message, separators=(",", ":")).encode("ascii")


def decode_tensor(obj: Any, where: str = "the output") -> np.ndarray:
    """An array from the script protocol's `{shape, dtype, data}` object; ProtocolError, naming `where`, for
    anything else."""
    if not isinstance(obj, dict):
        raise ProtocolError(f"{where} is {type(obj).__name__}, not a {{shape, dtype, data}} object")
    missing = [k for k in ("shape", "dtype", "data") if k not in obj]
    if missing:
        raise ProtocolError(f"{where} has no {', '.join(map(repr, missing))} (expected shape, dtype, data)")
    shape, dtype_name, data = obj["shape"], obj["dtype"], obj["data"]
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ProtocolError(f"{where}: shape {shape!r} is not a list of sizes")
    name = dtypes.canonical(dtype_name) if isinstance(dtype_name, str) else None
    if name is None:
        raise ProtocolError(f"{where}: unknown dtype {dtype_name!r}")
    if not isinstance(data, str):
        raise ProtocolError(f"{where}: data is not a base64 string")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ProtocolError(f"{where}: data is not valid base64 ({exc})") from None
    dtype = dtypes.info(name).numpy
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if len(raw) != count * dtype.itemsize:
        raise ProtocolError(
            f"{where}: {len(raw)} bytes of data for shape {shape} {name} ({count * dtype.itemsize} expected)"
        )
    # Strides, when given, are not read: the data is C-order, as upstream reads it (its own Python client wrote
    # byte strides where its daemon documented element strides).
    return np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype, copy=True).reshape(shape)


def decode_inputs(message: Any) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """A request as a script host reads it: (inputs, kwargs)."""
    if not isinstance(message, dict) or not isinstance(message.get("inputs"), dict):
        raise ProtocolError('the request is not {"inputs": {...}, "kwargs": {...}}')
    inputs = {name: decode_tensor(t, f"input {name!r}") for name, t in message["inputs"].items()}
    kwargs = message.get("kwargs") or {}
    if not isinstance(kwargs, dict):
        raise ProtocolError("kwargs is not an object")
    return inputs, {str(k): v for k, v in kwargs.items()}


def decode_reply(raw: bytes) -> tuple[np.ndarray, ...]:
    """The tensor(s) a script wrote on stdout (a stray log line before the JSON is an error that says so)."""
    if len(raw) > MAX_REPLY_BYTES:
        raise ProtocolError(f"the script wrote {len(raw):,} bytes on stdout, more than {MAX_REPLY_BYTES:,}")
    text = raw.decode("utf-8", "replace").strip()
    if not text:
        raise ProtocolError("the script wrote nothing on stdout (expected its output as JSON)")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        first = text.splitlines()[0][:120]
        raise ProtocolError(
            f"stdout is not one JSON object ({exc.msg} at line {exc.lineno}); it begins {first!r}. Print only "
            "the output JSON on stdout (logs go to stderr)"
        ) from None
    if isinstance(obj, dict) and "error" in obj and "data" not in obj:
        raise ProtocolError(f"the reference raised: {obj['error']}")
    if isinstance(obj, dict) and isinstance(obj.get("outputs"), list):
        if not obj["outputs"]:
            raise ProtocolError("`outputs` is empty")
        return tuple(decode_tensor(t, f"output {i}") for i, t in enumerate(obj["outputs"]))
    return (decode_tensor(obj),)


def encode_reply(outputs: tuple[np.ndarray, ...]) -> bytes:
    """What a script host writes back: one tensor as upstream does, several under `outputs`."""
    body: dict[str, Any] = (
        encode_tensor(outputs[0]) if len(outputs) == 1 else {"outputs": [encode_tensor(o) for o in outputs]}
    )
    return json.dumps(body, separators=(",", ":")).encode("ascii")
