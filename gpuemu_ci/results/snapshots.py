"""Input snapshots: the exact inputs of a failing case as an .npz named by its hash, with the metadata to rebuild
and replay the case."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from gpuemu_ci.errors import UsageError
from gpuemu_ci.files import atomic_write
from gpuemu_ci.results.codec import encode_extra

SNAPSHOT_DIR = "snapshots"


def clear_snapshots(out_dir: Path) -> None:
    """Remove the snapshots an earlier run left in `out_dir`: results.json names only this run's."""
    folder = out_dir / SNAPSHOT_DIR
    if folder.is_dir():
        for path in folder.glob("*.npz"):
            path.unlink(missing_ok=True)


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
    payload["__metadata__"] = np.frombuffer(
        json.dumps(meta, default=encode_extra).encode("utf-8"), dtype=np.uint8
    )
    buffer = io.BytesIO()
    # Uncompressed: random mantissas barely compress (about 7%) and zlib costs 30 times the write; artifact
    # uploads compress anyway.
    np.savez(buffer, **payload)  # type: ignore[arg-type]  # numpy's stub types **kwds as its bool flag
    data = buffer.getvalue()
    digest = hashlib.sha256(data).hexdigest()[:16]
    relative = f"{SNAPSHOT_DIR}/{digest}.npz"
    atomic_write(out_dir / relative, data)
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
