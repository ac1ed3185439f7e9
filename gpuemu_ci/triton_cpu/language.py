"""The interpreter's patching of `triton.language` (`_patch_lang`), made cheap and extended for the layer.

The interpreter patches the language (the builtins bound to its semantic, `range`, reductions) at every call of
a jit function, with a scan of every member of `triton.language`; the layer does that scan once per set of
language modules (`replayed_patch_lang`) and once per launch (`patched_once`), adds a scalar tensor's
`__index__` and a `tl.dot` that tells the builder whether the kernel left `input_precision` at its default,
and defers the patching of a launch until the kernel's Python first runs (`LazyPatch`: a replayed launch runs
none).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any, Protocol

import numpy as np

from gpuemu_ci.triton_cpu import active, imported
from gpuemu_ci.triton_cpu.boundary import Patch

MODULE = "triton.runtime.interpreter"
Patcher = Callable[[Any], Any]  # the interpreter's `_patch_lang(fn) -> scope`


class Restorable(Protocol):
    """A patch scope: what `_patch_lang` returns."""

    def restore(self) -> None:
        """Put back what the scope set."""


class LazyPatch:
    """The interpreter's language patches for one launch, made when the kernel's Python is first to run."""

    def __init__(self, module: ModuleType, fn: Any) -> None:
        self.module, self.fn = module, fn
        self.scope: Any = None

    def apply(self) -> None:
        """Patch the language for the kernel, once."""
        if self.scope is None:
            self.scope = self.module.__dict__["_patch_lang"](self.fn)

    def restore(self) -> None:
        """Undo what `apply` did, if it ran."""
        if self.scope is not None:
            self.scope.restore()


class _NothingToRestore:
    def restore(self) -> None:
        pass


def patched_once(patch_lang: Patcher) -> Patcher:
    """The interpreter's `_patch_lang` for the duration of one launch, doing its work once per set of language
    modules. The interpreter patches the language again at every call of a jit helper (`tl.max`, `tl.sum`, the
    kernel's own), in every program, and never restores those patches: each is a scan of every member of
    `triton.language` (most of a small program's time) that finds them patched already. Patching the same
    modules again within the launch sets the same wrappers, so skipping it changes nothing but the time."""
    done: set[tuple[int, ...]] = set()
    namespaces: set[int] = set()

    def once(fn: Any) -> Any:
        import triton.language as tl

        langs = _lang_key(fn)
        target = (
            fn if langs else imported.with_tl()
        )  # builtins imported by name only: the language is patched anyway
        langs = langs or _lang_key(target)
        scope: Any = None
        if langs not in done:
            done.add(langs)
            scope = patch_lang(target)
            if callable(getattr(scope, "set_attr", None)):
                scope.set_attr(tl.tensor, "__index__", _scalar_index)  # undone with the interpreter's patches
                for lang in (tl, tl.core):
                    if getattr(lang, "dot", None) is not None:
                        scope.set_attr(lang, "dot", _dot_noting(lang.dot))
        namespace = getattr(fn, "__globals__", None)
        if isinstance(namespace, dict) and id(namespace) not in namespaces:
            namespaces.add(id(namespace))
            scope = imported.patch_imported_builtins(namespace, scope)
        return scope if scope is not None else _NothingToRestore()

    return once


def _dot_noting(patched: Callable[..., Any]) -> Callable[..., Any]:
    """`tl.dot` as the interpreter patched it, telling the builder's `dot` whether the kernel left
    `input_precision` (and the deprecated `allow_tf32`) unset: fp32 inputs then take the backend's default
    (TF32 on NVIDIA)."""
    if getattr(patched, "_gpuemu_dot", False):
        return patched

    def dot(*args: Any, **kwargs: Any) -> Any:
        call = active.call()
        if call is None:
            return patched(*args, **kwargs)
        asked = [*args[3:5], kwargs.get("input_precision"), kwargs.get("allow_tf32")]
        before = call.dot_defaulted_now
        call.dot_defaulted_now = all(getattr(a, "value", a) is None for a in asked)
        try:
            return patched(*args, **kwargs)
        finally:
            call.dot_defaulted_now = before

    dot._gpuemu_dot = True  # type: ignore[attr-defined]
    return dot


def _scalar_index(self: Any) -> int:
    """A scalar tensor as a loop bound or index, as Triton 3.7 and later read it. Triton 3.6's interpreter
    calls `int()` on the one-element array that holds a scalar argument, which NumPy 2.5 refuses, so every
    `range(0, K, BK)` over a runtime K raised there; the compiled kernel loops."""
    return int(np.asarray(self.handle.data).squeeze())


# What the interpreter's `_patch_lang` sets, per set of language modules it patches: (owner, name, value). A
# cache of this module's own: the values are the interpreter's stateless wrappers, the same whenever made.
_lang_patches: dict[tuple[int, ...], list[Patch]] = {}
_ABSENT = object()


def _lang_key(fn: Any) -> tuple[int, ...]:
    """Which language modules `_patch_lang(fn)` patches: those of `tl` and `tl.core` in the function's globals."""
    import triton.language as tl

    return tuple(sorted({id(v) for v in fn.__globals__.values() if v is tl or v is tl.core}))


def replayed_patch_lang(original: Patcher) -> Patcher:
    """The interpreter's `_patch_lang(fn)` without its scan of every member of `triton.language` (via
    `inspect.getmembers`, most of a small launch's own time): the first call for a set of language modules
    runs it and records what it set; later calls set the same values through a scope of the interpreter's
    own kind, so that restoring it puts back what was there. The values are the interpreter's stateless
    wrappers (builtins bound to its semantic, `range`, `to_ir`, reductions), the same whenever made."""
    module = sys.modules[MODULE]

    def patch_lang(fn: Any) -> Any:
        key = _lang_key(fn)
        recorded = _lang_patches.get(key)
        if recorded is None:
            scope = original(fn)
            changes = getattr(scope, "_changes", None)
            if isinstance(changes, list):
                made = [(obj, name, vars(obj).get(name, _ABSENT)) for obj, name, _ in changes]
                if all(
                    value is not _ABSENT for _, _, value in made
                ):  # else: the interpreter's way, every time
                    _lang_patches[key] = made
            return scope
        scope = module._LangPatchScope()
        missing = module.__dict__.get("_MISSING", _ABSENT)
        if missing is _ABSENT:
            for obj, name, value in recorded:
                scope.set_attr(obj, name, value)
            return scope
        # What `set_attr` does, inline (a method call per attribute was most of the replay's time); the
        # scope's own `restore` puts them back.
        changes = []
        for obj, name, value in recorded:
            changes.append((obj, name, getattr(obj, name, missing)))
            setattr(obj, name, value)
        scope._changes = changes
        return scope

    return patch_lang
