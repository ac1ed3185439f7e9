"""Kernels run from changed source, in memory, inside the op's worker (`gpuemu-ci mutate`).

A `KernelPatch` carries the whole text of the file that defines a Triton kernel, with one change made. In the
worker, after the op's own imports, the changed `def` is compiled (under a file name of its own, its lines
registered with `linecache` so that Triton's `inspect.getsource` finds the changed text) in the globals of the
module that the worker imported, and wrapped by the kernel's own innermost decorator (`@triton.jit`, with its
arguments). Around each call of the op, the state of the kernel object the module holds is swapped with the
new one's: every reference to the kernel (the launcher's global lookup, a `from module import kernel` copy,
an autotuner wrapping it) runs the changed code, and after the call the original is back, so that the next
case in this worker (of the original op, or of another change) runs what its task says. The user's files are
never written, and the change runs only where user code runs: in the worker.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import linecache
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gpuemu_ci.backends.interface import KernelPatch


class PatchError(Exception):
    """The patch cannot be applied here (the kernel is not where the patch says, or its source does not build)."""


@dataclass
class _Swap:
    target: Any  # the kernel object the module holds (the innermost @triton.jit object)
    state: dict[str, Any]  # the changed kernel's state


_PREPARED: dict[tuple[KernelPatch, ...], list[_Swap]] = {}


def _kernel_object(patch: KernelPatch) -> Any:
    """The innermost `@triton.jit` object behind `patch.function` in its module: the one whose `.fn` is the
    plain Python function compiled from `patch.path`."""
    try:
        module = importlib.import_module(patch.module)
    except Exception as exc:
        raise PatchError(f"cannot import {patch.module!r} to change {patch.function}: {exc}") from None
    obj = getattr(module, patch.function, None)
    while obj is not None and not _is_jit(obj):
        obj = getattr(obj, "fn", None)  # an autotuner or heuristics wrapper around the kernel
    if obj is None:
        raise PatchError(f"{patch.module}.{patch.function} is not a @triton.jit function in the worker")
    if obj.fn.__code__.co_filename != patch.path:
        raise PatchError(
            f"{patch.module}.{patch.function} comes from {obj.fn.__code__.co_filename}, not {patch.path}"
        )
    return obj


def _is_jit(obj: Any) -> bool:
    fn = getattr(obj, "fn", None)
    return getattr(fn, "__code__", None) is not None and hasattr(obj, "__dict__")


def _changed_function(patch: KernelPatch, original: Any) -> Any:
    """The patch's `def` compiled in the original's globals and wrapped by its innermost decorator."""
    try:
        tree = ast.parse(patch.source)
    except SyntaxError as exc:
        raise PatchError(f"the changed source of {patch.function} does not parse: {exc}") from None
    line = original.fn.__code__.co_firstlineno
    defs = [
        node
        for node in _module_level(tree.body)
        if isinstance(node, ast.FunctionDef) and node.name == patch.function
    ]
    if not defs:
        raise PatchError(f"the changed source defines no function {patch.function!r}")
    node = min(defs, key=lambda d: abs(d.lineno - line))
    if not node.decorator_list:
        raise PatchError(f"{patch.function} has no decorator in the changed source")
    decorator = node.decorator_list[-1]
    node.decorator_list = []
    filename = f"{patch.path} [{patch.label}]"
    lines = patch.source.splitlines(keepends=True)
    linecache.cache[filename] = (len(patch.source), None, lines, filename)  # Triton reads the source back
    namespace: dict[str, Any] = {}
    globals_ = original.fn.__globals__
    exec(compile(ast.Module([node], type_ignores=[]), filename, "exec"), globals_, namespace)
    wrap = eval(compile(ast.Expression(decorator), filename, "eval"), globals_)
    changed = wrap(namespace[patch.function])
    if type(changed) is not type(original):
        raise PatchError(
            f"{patch.function}'s innermost decorator makes a {type(changed).__name__}, "
            f"the module holds a {type(original).__name__}"
        )
    return changed


def _module_level(body: Sequence[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements at module level, including those inside module-level `if`/`try` blocks."""
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.Try):
            for part in (node.body, node.orelse, *(h.body for h in getattr(node, "handlers", ()))):
                yield from _module_level(part)


def prepare(patches: tuple[KernelPatch, ...]) -> None:
    """Build the changed kernels (once per set of patches in this process). Raises PatchError."""
    if not patches or patches in _PREPARED:
        return
    swaps = []
    for patch in patches:
        original = _kernel_object(patch)
        try:
            changed = _changed_function(patch, original)
        except PatchError:
            raise
        except Exception as exc:  # the decorator or the def raised: the change does not build
            raise PatchError(
                f"building the changed {patch.function} failed: {type(exc).__name__}: {exc}"
            ) from None
        swaps.append(_Swap(original, changed.__dict__))
    _PREPARED[patches] = swaps


@contextlib.contextmanager
def applied(patches: tuple[KernelPatch, ...]) -> Iterator[None]:
    """Run the block with the patched kernels in place of the originals (prepare() first)."""
    if not patches:
        yield
        return
    swaps = _PREPARED[patches]
    saved = [swap.target.__dict__ for swap in swaps]
    try:
        for swap in swaps:
            swap.target.__dict__ = swap.state
        yield
    finally:
        for swap, state in zip(swaps, saved, strict=True):
            swap.target.__dict__ = state
