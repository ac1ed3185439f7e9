"""Judging one call's output against the op's reference: upstream's `validate_op` / `validate_pytorch` context
managers and `Client.submit_output`. The op (its reference, schema and error model) comes from gpuemu.toml;
the oracle is the shadow checker's (shadow/checker.py), on the values the caller computed with."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpuemu_ci.config.model import Config, Tolerance
from gpuemu_ci.dtypes import DTYPES
from gpuemu_ci.shadow.checker import Shadow, ShadowReferenceError
from gpuemu_ci.shadow.tensors import hold, is_tensor


class ValidationError(AssertionError):
    """Upstream's: the output does not match the reference (or could not be judged); carries the result."""

    def __init__(self, message: str, result: ValidationResult) -> None:
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class ValidationResult:
    """One judged call. `failures`: upstream's list of {"kind", "message"}; `seed`: the case's (when from a
    batch), else None."""

    op_name: str
    passed: bool
    failures: list[dict[str, str]] = field(default_factory=list)
    seed: int | None = None


def as_numpy(value: Any) -> np.ndarray:
    """A NumPy array or a torch tensor (any device, bfloat16 too) as NumPy; anything else as np.asarray."""
    return hold(value).numpy() if is_tensor(value) else np.asarray(value)


def judge_call(
    config: Config,
    op_name: str,
    inputs: Mapping[str, Any],
    output: Any,
    kwargs: Mapping[str, Any] | None = None,
    *,
    atol: float | None = None,
    rtol: float | None = None,
    seed: int | None = None,
    capture_dir: Path | None = None,
) -> ValidationResult:
    """The oracle's verdict on `output` for `inputs`. `atol`/`rtol` (upstream's per-call tolerances) judge with
    allclose, |y - r| <= atol + rtol |r|, against the fp64 reference, instead of the op's error model."""
    checker = Shadow(op_name, config=config, start=False, capture_dir=capture_dir or Path("gpuemu-captures"))
    if atol is not None or rtol is not None:
        tolerance = Tolerance(atol=atol or 0.0, rtol=rtol or 0.0)
        floats = tuple((name, tolerance) for name, info in DTYPES.items() if info.is_float)
        model = dataclasses.replace(checker.op.error_model, family=None, tolerances=floats)
        checker.op = dataclasses.replace(checker.op, error_model=model)
    arrays = {name: as_numpy(value) for name, value in inputs.items()}
    outputs = tuple(as_numpy(o) for o in (output if isinstance(output, tuple | list) else (output,)))
    try:
        verdict = checker.judge(arrays, dict(kwargs or {}), outputs)
    except ShadowReferenceError as exc:
        return ValidationResult(op_name, False, [{"kind": "reference_error", "message": str(exc)}], seed)
    if verdict is None:
        shapes = ", ".join(f"{n}{tuple(a.shape)}" for n, a in arrays.items())
        declared = ", ".join(f"{s.name}{list(s.dims)}" for s in checker.op.shapes.inputs)
        message = (
            f"not judged: the inputs ({shapes}) do not fit op {op_name!r}'s inputs in gpuemu.toml ({declared}); "
            "declare [ops.inputs] with the ranks and names this call uses"
        )
        return ValidationResult(op_name, False, [{"kind": "not_judged", "message": message}], seed)
    failures = [{"kind": f.kind.value, "message": f.message} for f in verdict.findings]
    return ValidationResult(op_name, verdict.passed, failures, seed)
