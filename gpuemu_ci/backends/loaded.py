"""What loading a target gives the worker: a `Loaded` (the callable and how to name it) or a `LoadError`. Its
own module so that every loader (loading.py, cuda.py, script_process.py) builds them without importing the
others."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

Invoke = Callable[[dict[str, Any], dict[str, Any]], Any]


class LoadError(Exception):
    """The target could not be imported or does not provide the expected function."""


@dataclass(frozen=True)
class Loaded:
    """A ready-to-call target: `invoke(inputs, kwargs)`; `signature`: the function's, when it is called with
    the inputs and kwargs as keyword arguments (CALLABLE), so that a mismatch is one error, not one per case."""

    invoke: Invoke
    label: str
    signature: inspect.Signature | None = None

    def mismatch(self, names: Iterable[str]) -> str | None:
        """Why `invoke` cannot take these keyword arguments (a parameter no input fills, an input no parameter
        takes), naming the function and the parameter; None when it can or nothing is known."""
        if self.signature is None:
            return None
        given = list(dict.fromkeys(names))
        params = self.signature.parameters
        keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        unexpected = [
            n for n in given if not takes_any and (n not in params or params[n].kind not in keyword)
        ]
        missing = [
            p.name
            for p in params.values()
            if p.default is inspect.Parameter.empty
            and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
            and (p.name not in given or p.kind not in keyword)
        ]
        if not unexpected and not missing:
            return None
        problems = []
        if unexpected:
            problems.append(f"no parameter named {', '.join(map(repr, unexpected))}")
        if missing:
            problems.append(f"parameter {', '.join(map(repr, missing))} is given no value")
        bare = self.signature.replace(
            parameters=[p.replace(annotation=inspect.Parameter.empty) for p in params.values()],
            return_annotation=inspect.Signature.empty,
        )
        return (
            f"{self.label}{bare} cannot be called as gpuemu-ci calls it, with keyword arguments "
            f"{', '.join(given) or '(none)'} (the op's inputs and kwargs in gpuemu.toml): "
            + "; ".join(problems)
        )
