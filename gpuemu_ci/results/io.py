"""Writing and reading results documents and input snapshots; every write is atomic (temp file + rename)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from gpuemu_ci.errors import UsageError
from gpuemu_ci.results.model import SCHEMA_VERSION

RESULTS_NAME = "results.json"
SNAPSHOT_DIR = "snapshots"


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def dumps(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=False, allow_nan=False, default=_json_default) + "\n"


def write_results(out_dir: Path, document: dict[str, Any]) -> Path:
    path = out_dir / RESULTS_NAME
    atomic_write_bytes(path, dumps(document).encode("utf-8"))
    return path


def read_results(path: Path) -> dict[str, Any]:
    """Loads a results document, with a clear error for anything that is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"results file not found: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path} is not a readable results document: {exc}") from None
    if not isinstance(data, dict) or "schema_version" not in data or "ops" not in data:
        raise UsageError(f"{path} is not a gpuemu-ci results document (no schema_version/ops)")
    if str(data["schema_version"]) != SCHEMA_VERSION:
        raise UsageError(
            f"{path} has results schema version {data['schema_version']}; this gpuemu-ci reads "
            f"version {SCHEMA_VERSION}"
        )
    return data


def write_snapshot(out_dir: Path, arrays: dict[str, np.ndarray], metadata: dict[str, Any]) -> str:
    """An .npz of the case's logical inputs plus its metadata; named by the hash of its content. Returns the
    path relative to out_dir."""
    payload: dict[str, np.ndarray] = {}
    dtypes: dict[str, str] = {}
    for name, array in arrays.items():
        contiguous = np.ascontiguousarray(array)
        dtypes[name] = contiguous.dtype.name if contiguous.dtype.name != "bfloat16" else "bfloat16"
        # bfloat16 is stored as its raw uint16 bits: .npz has no bfloat16 type.
        payload[f"input:{name}"] = contiguous.view(np.uint16) if dtypes[name] == "bfloat16" else contiguous
    meta = dict(metadata, input_dtypes=dtypes)
    payload["__metadata__"] = np.frombuffer(dumps(meta).encode("utf-8"), dtype=np.uint8)
    buffer = io.BytesIO()
    # Uncompressed: random mantissas barely compress (about 7%) and zlib costs 30 times the write; artifact
    # uploads compress anyway.
    np.savez(buffer, **payload)
    data = buffer.getvalue()
    digest = hashlib.sha256(data).hexdigest()[:16]
    relative = f"{SNAPSHOT_DIR}/{digest}.npz"
    atomic_write_bytes(out_dir / relative, data)
    return relative


def read_snapshot(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    import ml_dtypes

    try:
        with np.load(path, allow_pickle=False) as archive:
            meta = json.loads(bytes(archive["__metadata__"]).decode("utf-8"))
            arrays: dict[str, np.ndarray] = {}
            for key in archive.files:
                if not key.startswith("input:"):
                    continue
                name = key.split(":", 1)[1]
                array = archive[key]
                if meta.get("input_dtypes", {}).get(name) == "bfloat16":
                    array = array.view(ml_dtypes.bfloat16)
                arrays[name] = array
    except (OSError, KeyError, ValueError) as exc:
        raise UsageError(f"{path} is not a readable gpuemu-ci snapshot: {exc}") from None
    order = meta.get("input_order") or list(arrays)
    return {name: arrays[name] for name in order}, meta


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
