"""Source-level mutants of third-party functions: the bug is a few-line textual diff of the shipped source.

Liger's code is not copied into this repository: a mutant is made at import time from the installed
function's own source (`inspect.getsource`), with each `(old, new)` edit required to match exactly once, so an
upstream change that moves the mutated line fails loudly instead of silently testing the unmutated kernel.
The mutant lives in a copy of the original module's globals (plus `overrides`, e.g. a mutated kernel that a
mutated wrapper must launch). Triton's `@triton.jit` needs the source text of what it decorates, so the
mutated source is registered in `linecache` under a synthetic file name.
"""

from __future__ import annotations

import hashlib
import inspect
import linecache
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

Edit = tuple[str, str]


def _python_function(fn: Any) -> Any:
    """The plain function behind a Triton JITFunction / InterpretedFunction, or `fn` itself."""
    return getattr(fn, "fn", fn)


def mutant(fn: Any, edits: Sequence[Edit], overrides: Mapping[str, Any] | None = None) -> Any:
    """`fn` re-created from its source with `edits` applied (decorators such as `@triton.jit` included)."""
    original = _python_function(fn)
    source = textwrap.dedent(inspect.getsource(original))
    for old, new in edits:
        count = source.count(old)
        if count != 1:
            raise ValueError(f"mutating {original.__qualname__}: {old!r} occurs {count} times, expected once")
        source = source.replace(old, new)
    digest = hashlib.blake2b(source.encode(), digest_size=6).hexdigest()
    filename = f"<field-mutant {original.__module__}.{original.__qualname__} {digest}>"
    lines = source.splitlines(keepends=True)
    linecache.cache[filename] = (len(source), None, lines, filename)
    namespace: dict[str, Any] = dict(original.__globals__)
    namespace.update(overrides or {})
    exec(compile(source, filename, "exec"), namespace)
    return namespace[original.__name__]
