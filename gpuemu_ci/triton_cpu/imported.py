"""Triton's builtins a kernel module imported by name (`from triton.language import exp`), bound to the
interpreter for a launch as the compiler binds them. The interpreter patches only `tl.exp` and its kin, so a
kernel calling `exp(...)` raised "Did you forget to add @triton.jit ?" under it; the names are set in the
module's globals through the interpreter's own patch scope, which puts them back."""

from __future__ import annotations

import sys
import types
from typing import Any

MODULE = "triton.runtime.interpreter"


class _Namespace:
    """A module's globals as an object, so that the interpreter's patch scope can set and restore names in it."""

    def __init__(self, names: dict[str, Any]) -> None:
        object.__setattr__(self, "_names", names)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._names[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self._names[name] = value

    def __delattr__(self, name: str) -> None:
        del self._names[name]


def with_tl() -> Any:
    """Stands in for a function that sees `triton.language` as `tl` (to patch the language for a kernel that
    imported its builtins by name only)."""
    import triton.language as tl

    return types.SimpleNamespace(__globals__={"tl": tl})


def patch_imported_builtins(namespace: dict[str, Any], scope: Any) -> Any:
    """Triton's builtins a kernel module imported by name (`from triton.language import load`) bound to the
    interpreter, as the compiler binds them (the interpreter patches only `tl.load`, so the kernel raised
    "Did you forget to add @triton.jit ?"). Returns the scope that restores them (made if `scope` is None)."""
    import triton.language as tl

    module = sys.modules[MODULE]
    patch_attr = module.__dict__.get("_patch_attr")
    direct = [(name, value) for name, value in list(namespace.items()) if tl.core.is_builtin(value)]
    if not direct or patch_attr is None or "_LangPatchScope" not in module.__dict__:
        return scope
    if scope is None or not callable(getattr(scope, "set_attr", None)):
        scope = module._LangPatchScope()
    for name, member in direct:
        patch_attr(_Namespace(namespace), name, member, module.interpreter_builder, scope)
    return scope
