"""The dtypes gpuemu-ci knows, by canonical name, with the format constants the oracle needs."""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class DtypeInfo:
    """What the oracle and the fuzzer need to know of a dtype: its NumPy dtype, unit roundoff, smallest
    subnormal and normal, largest finite value and width."""

    name: str
    numpy: np.dtype
    is_float: bool
    unit_roundoff: float  # u = eps / 2 (0 for integers)
    min_subnormal: float  # smallest positive subnormal (0 for integers)
    min_normal: float
    max_finite: float
    bits: int


def _float_info(name: str, dtype: np.dtype) -> DtypeInfo:
    finfo = ml_dtypes.finfo(dtype) if name == "bfloat16" else np.finfo(dtype)
    return DtypeInfo(
        name=name,
        numpy=np.dtype(dtype),
        is_float=True,
        unit_roundoff=float(finfo.eps) / 2.0,
        min_subnormal=float(finfo.smallest_subnormal),
        min_normal=float(finfo.smallest_normal),
        max_finite=float(finfo.max),
        bits=np.dtype(dtype).itemsize * 8,
    )


def _int_info(name: str, dtype: type) -> DtypeInfo:
    if dtype is np.bool_:
        return DtypeInfo(name, np.dtype(np.bool_), False, 0.0, 0.0, 0.0, 1.0, 8)
    info = np.iinfo(dtype)
    return DtypeInfo(name, np.dtype(dtype), False, 0.0, 0.0, 0.0, float(info.max), info.bits)


DTYPES: dict[str, DtypeInfo] = {
    "float64": _float_info("float64", np.dtype(np.float64)),
    "float32": _float_info("float32", np.dtype(np.float32)),
    "float16": _float_info("float16", np.dtype(np.float16)),
    "bfloat16": _float_info("bfloat16", np.dtype(ml_dtypes.bfloat16)),
    "int8": _int_info("int8", np.int8),
    "int16": _int_info("int16", np.int16),
    "int32": _int_info("int32", np.int32),
    "int64": _int_info("int64", np.int64),
    "uint8": _int_info("uint8", np.uint8),
    "uint16": _int_info("uint16", np.uint16),
    "uint32": _int_info("uint32", np.uint32),
    "uint64": _int_info("uint64", np.uint64),
    "bool": _int_info("bool", np.bool_),
}

# Common spellings users write; the canonical name is what reports show.
ALIASES: dict[str, str] = {
    "fp64": "float64",
    "f64": "float64",
    "double": "float64",
    "fp32": "float32",
    "f32": "float32",
    "float": "float32",
    "fp16": "float16",
    "f16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
}


def canonical(name: str) -> str | None:
    """Canonical dtype name, or None when unknown."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    return key if key in DTYPES else None


def info(name: str) -> DtypeInfo:
    """The DtypeInfo of a dtype name as gpuemu.toml spells it (`float32`, `bfloat16`, ...); KeyError for an
    unknown name."""
    return DTYPES[name]


def name_of(dtype: np.dtype) -> str:
    """Canonical name of a NumPy dtype (bfloat16 through ml_dtypes)."""
    dtype = np.dtype(dtype)
    if dtype == np.dtype(ml_dtypes.bfloat16):
        return "bfloat16"
    for name, item in DTYPES.items():
        if item.numpy == dtype:
            return name
    return str(dtype)


def is_float_dtype(dtype: np.dtype) -> bool:
    """Whether `dtype` is one of the floating dtypes gpuemu-ci judges with an error model (float64, float32,
    float16, bfloat16)."""
    return name_of(dtype) in ("float64", "float32", "float16", "bfloat16")
