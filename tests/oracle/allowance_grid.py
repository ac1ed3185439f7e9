"""A fixed grid of cases judged through the oracle's public entry points (`bounds.allowed_error`, `judge.judge`,
`gradients.structure_bound` and `gradients.judge_gradients`), fingerprinted element by element: the golden
(`allowance_golden.json`) was written by the oracle before its bound terms became one protocol and one list per
family, and `test_allowance_golden.py` checks the oracle still computes every allowance bit for bit and every
message word for word.

    python3 -m tests.oracle.allowance_grid > tests/oracle/allowance_golden.json   # only to accept a change
    python3 -m tests.oracle.allowance_grid --bits    # bit for bit against the golden (on the machine that wrote it)
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from gpuemu_ci.calls import CallResult, CallStatus, CaseRun
from gpuemu_ci.config.model import (
    ErrorModel,
    Family,
    InputSpec,
    Intermediate,
    IntermediateEffect,
    OpShapes,
    OpSpec,
    OpTargets,
    Validation,
)
from gpuemu_ci.oracle import bounds, gradients, judge

DTYPES = ("float32", "float16", "bfloat16", "float64")
_CAST = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float64": np.float64}
_MODELS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("default", {}),
    ("ftz", {"flush_to_zero": True}),
    ("acc64", {"accumulator": "float64", "transcendental_ulps": 0.0}),
    ("rope", {"intermediates": (Intermediate("theta", IntermediateEffect.ROTATION, None, "N"),)}),
    ("scale", {"intermediates": (Intermediate("s", IntermediateEffect.SCALE, "float16", None),)}),
)


def _op(name: str, family: Family, inputs: tuple[InputSpec, ...], output: Any, **model: Any) -> OpSpec:
    return OpSpec(
        name=name,
        dtypes=DTYPES,
        targets=OpTargets(op="m:f", reference="m:f"),
        shapes=OpShapes(inputs=inputs, dims=(), output_dims=output),
        error_model=ErrorModel(family=family, **model),
    )


def _values(rng: np.random.Generator, shape: tuple[int, ...], kind: str, dtype: str) -> np.ndarray:
    """Inputs of one kind, rounded to the dtype, as float64."""
    if kind == "normal":
        x = rng.standard_normal(shape)
    elif kind == "wide":
        x = rng.standard_normal(shape) * 10.0 ** rng.integers(-30, 30, shape)
    elif kind == "tiny":
        x = rng.standard_normal(shape) * 1e-40
    elif kind == "negative":
        x = -np.abs(rng.standard_normal(shape)) * 3.0
    else:  # "special": a few non-finite values among normal ones
        x = rng.standard_normal(shape)
        x.flat[:: max(1, x.size // 3)] = np.inf
        x.flat[1] = np.nan
    with np.errstate(all="ignore"):
        return np.asarray(x.astype(_CAST[dtype]).astype(np.float64))


def _family_cases(
    rng: np.random.Generator, dtype: str, kind: str, model: dict[str, Any]
) -> Iterator[tuple[str, OpSpec, dict[str, np.ndarray], dict[str, int], dict[str, object], np.ndarray, Any]]:
    """(name, op, inputs, dims, kwargs, reference, reference on |inputs|) for each family."""
    m, k, n = 5, 9, 4
    a, b = _values(rng, (m, k), kind, dtype), _values(rng, (k, n), kind, dtype)
    with np.errstate(all="ignore"):
        yield (
            "matmul",
            _op(
                "matmul",
                Family.MATMUL,
                (InputSpec("a", ("M", "K")), InputSpec("b", ("K", "N"))),
                ("M", "N"),
                **model,
            ),
            {"a": a, "b": b},
            {"M": m, "K": k, "N": n},
            {},
            a @ b,
            np.abs(a) @ np.abs(b),
        )
        x = _values(rng, (m, k), kind, dtype)
        for name, reduce in (("sum", np.sum), ("logsumexp", None), ("norm", None)):
            if reduce is np.sum:
                r, r_abs = x.sum(axis=-1), np.abs(x).sum(axis=-1)
            elif name == "logsumexp":
                top = np.max(np.where(np.isfinite(x), x, 0.0), axis=-1, keepdims=True)
                r = (top + np.log(np.exp(x - top).sum(axis=-1, keepdims=True)))[:, 0]
                r_abs = None
            else:
                r, r_abs = np.sqrt((x * x).sum(axis=-1)), None
            yield (
                name,
                _op(name, Family.REDUCTION, (InputSpec("x", ("M", "K")),), ("M",), **model),
                {"x": x},
                {"M": m, "K": k},
                {},
                r,
                r_abs,
            )
        yield (
            "cumsum",
            _op("cumsum", Family.SCAN, (InputSpec("x", ("M", "K")),), ("M", "K"), **model),
            {"x": x},
            {"M": m, "K": k},
            {},
            np.cumsum(x, axis=-1),
            np.cumsum(np.abs(x), axis=-1),
        )
        e = np.exp(x - np.max(np.where(np.isfinite(x), x, 0.0), axis=-1, keepdims=True))
        for name, r in (
            ("softmax", e / e.sum(axis=-1, keepdims=True)),
            ("log_softmax", np.log(e / e.sum(-1, keepdims=True))),
        ):
            yield (
                name,
                _op(name, Family.SOFTMAX, (InputSpec("x", ("M", "N")),), ("M", "N"), **model),
                {"x": x},
                {"M": m, "N": k},
                {},
                r,
                None,
            )
        w = _values(rng, (k,), "normal", dtype)
        mean = x.mean(axis=-1, keepdims=True)
        layer = (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + 1e-5) * w
        yield (
            "layer_norm",
            _op(
                "layer_norm",
                Family.NORM,
                (InputSpec("x", ("M", "N")), InputSpec("weight", ("N",))),
                ("M", "N"),
                **model,
            ),
            {"x": x, "weight": w},
            {"M": m, "N": k},
            {"eps": 1e-5},
            layer,
            None,
        )
        y = _values(rng, (m, k), kind, dtype)
        yield (
            "mul_exp",
            _op(
                "mul_exp",
                Family.ELEMENTWISE,
                (InputSpec("x", ("M", "N")), InputSpec("y", ("M", "N"))),
                ("M", "N"),
                **model,
            ),
            {"x": x, "y": y},
            {"M": m, "N": k},
            {},
            x * np.exp(np.clip(y, -50, 50)),
            None,
        )
        q, kk, v = (_values(rng, (2, 6, 4), kind, dtype) for _ in range(3))
        scores = q @ np.swapaxes(kk, -1, -2) / 2.0
        p = np.exp(scores - np.max(np.where(np.isfinite(scores), scores, 0.0), axis=-1, keepdims=True))
        p = p / p.sum(axis=-1, keepdims=True)
        spec = tuple(InputSpec(nm, ("B", "N", "D")) for nm in ("q", "k", "v"))
        yield (
            "attention",
            _op("attention", Family.ATTENTION, spec, ("B", "N", "D"), **model),
            {"q": q, "k": kk, "v": v},
            {"B": 2, "N": 6, "D": 4},
            {},
            p @ v,
            np.abs(p) @ np.abs(v),
        )
        yield (
            "argmax",
            _op("argmax", Family.ARGMAX, (InputSpec("x", ("M", "K")),), ("M", "K"), **model),
            {"x": x},
            {"M": m, "K": k},
            {},
            x,
            np.abs(x),
        )


def digest(array: Any) -> dict[str, Any]:
    """The allowance's figures: the SHA-256 of its float64 bytes (shape included: equal digests, equal bits on
    one machine), and the sum and largest of its finite elements and the count of the others (what a test compares
    across machines, whose libm may round an exp differently in the last bit)."""
    a = np.ascontiguousarray(np.asarray(array, dtype=np.float64))
    finite = a[np.isfinite(a)]
    return {
        "bits": hashlib.sha256(repr(a.shape).encode() + a.tobytes()).hexdigest()[:24],
        "sum": float(finite.sum()),
        "max": float(finite.max(initial=0.0)),
        "nonfinite": int(a.size - finite.size),
    }


def _forward(out: dict[str, Any]) -> None:
    rng = np.random.default_rng(50)
    for dtype in DTYPES:
        for kind in ("normal", "wide", "tiny", "negative", "special"):
            for model_name, model in _MODELS:
                for name, op, inputs, dims, kwargs, r, r_abs in _family_cases(rng, dtype, kind, model):
                    for correlated, dot in ((False, 0.0), (True, 2.0**-11)):
                        case = bounds.BoundInputs(
                            r, inputs, r_abs, dims, kwargs, dtype, dtype, correlated, dot, ("x",)
                        )
                        with np.errstate(all="ignore"):
                            allowed = bounds.allowed_error(op, case)
                        key = f"bound/{name}/{dtype}/{kind}/{model_name}/{int(correlated)}"
                        out[key] = digest(allowed)
                    if kind in ("normal", "wide", "tiny") and model_name in ("default", "ftz", "rope"):
                        out[f"judge/{name}/{dtype}/{kind}/{model_name}"] = _judged(
                            op, dtype, inputs, dims, kwargs, r, r_abs
                        )


def _judged(
    op: OpSpec,
    dtype: str,
    inputs: dict[str, np.ndarray],
    dims: dict[str, int],
    kwargs: dict[str, object],
    r: np.ndarray,
    r_abs: Any,
) -> list[Any]:
    """The verdict's figures and words on an output rounded to the dtype, and on one made wrong at one element."""
    cast = _CAST[dtype]
    with np.errstate(all="ignore"):
        y = np.asarray(r).astype(cast)
        wrong = y.copy()
        wrong.flat[0] = cast(float(np.asarray(r).flat[0]) * 1.5 + 1.0)
    found = []
    for output in (y, wrong):
        context = judge.CaseContext(dtype, dims, kwargs, {n: a.astype(cast) for n, a in inputs.items()})
        run = CaseRun(
            reference=CallResult(CallStatus.OK, (np.asarray(r, dtype=np.float64),)),
            op=CallResult(CallStatus.OK, (output,)),
            reference_abs=None
            if r_abs is None
            else CallResult(CallStatus.OK, (np.asarray(r_abs, dtype=np.float64),)),
        )
        op_here = replace(op, output_dtype=None)
        verdict = judge.judge(op_here, context, run, Validation())
        stats = verdict.stats
        found.append(
            [
                verdict.passed,
                [(f.kind.value, f.message) for f in verdict.findings],
                None if stats is None else [stats.headroom, stats.max_abs_error, stats.allowed_at_worst],
            ]
        )
    return found


def _gradients(out: dict[str, Any]) -> None:
    rng = np.random.default_rng(51)
    for dtype in ("float32", "float16", "bfloat16"):
        for kind in ("normal", "wide", "tiny"):
            for model_name, model in _MODELS[:3]:
                for name, op, inputs, dims, kwargs, r, _ in _family_cases(rng, dtype, kind, model):
                    names = tuple(inputs)
                    grads = tuple(_values(rng, a.shape, kind, dtype) for a in inputs.values())
                    upstream = (_values(rng, np.shape(r), "normal", dtype),)
                    case = gradients.GradientCase(
                        dtype=dtype,
                        dims=dims,
                        names=names,
                        input_dtypes=dict.fromkeys(names, dtype),
                        reference=grads,
                        reference_abs=tuple(np.abs(g) for g in grads),
                        low=partial(_moved, grads),
                        inputs=inputs,
                        forward=(np.asarray(r),),
                        upstream=upstream,
                        kwargs=kwargs,
                    )
                    with np.errstate(all="ignore"):
                        for gname, g in zip(names, grads, strict=True):
                            allowed = gradients.structure_bound(op, case, gname, g, np.abs(g), dtype)
                            out[f"grad-bound/{name}/{gname}/{dtype}/{kind}/{model_name}"] = digest(allowed)
                        cast = _CAST[dtype]
                        given = tuple((g * 1.01 + 1e-3).astype(cast) for g in grads)
                        verdict = gradients.judge_gradients(op, case, given, None, Validation())
                    out[f"grad-judge/{name}/{dtype}/{kind}/{model_name}"] = [
                        [[f.kind.value, f.message] for f in verdict.findings],
                        [[n, s.headroom, s.max_abs_error, s.allowed_at_worst] for n, s in verdict.stats],
                    ]


def _moved(grads: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """A stand-in for the reference's measured backward: each gradient moved by 2^-10 relative."""
    return tuple(g * (1 + 2.0**-10) for g in grads)


def grid() -> dict[str, Any]:
    """Every fingerprint of the grid, by case."""
    out: dict[str, Any] = {}
    _forward(out)
    _gradients(out)
    return out


def _floats(value: Any) -> Any:
    """JSON cannot hold NaN or infinities portably: spell them."""
    if isinstance(value, float) and not np.isfinite(value):
        return repr(value)
    if isinstance(value, list | tuple):
        return [_floats(v) for v in value]
    if isinstance(value, dict):
        return {k: _floats(v) for k, v in value.items()}
    return value


def main(argv: list[str]) -> int:
    """Print the grid's fingerprints; with `--bits`, compare them bit for bit with the golden instead."""
    now = json.loads(json.dumps(_floats(grid())))
    if "--bits" not in argv:
        print(json.dumps(now, indent=0, sort_keys=True))
        return 0
    golden = json.loads((Path(__file__).with_name("allowance_golden.json")).read_text())
    changed = sorted(key for key in golden if golden[key] != now.get(key))
    print(
        f"{len(golden) - len(changed)} of {len(golden)} cases identical bit for bit; changed: {changed[:20]}"
    )
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
