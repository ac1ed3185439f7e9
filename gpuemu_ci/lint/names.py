"""Kernel identity: demangled, normalised names that stay the same across checkouts, and `entries` selection.

Anonymous-namespace kernels embed a hash of the absolute source path (`_GLOBAL__N__92a91f80_11_internal_cu_
d589cb60`) and `-rdc` prefixes static kernels with `__nv_static_33__<hash>__`, so a fresh clone in another
directory would otherwise produce different names for the same kernel.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import re
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuemu_ci.errors import ConfigError

# The anonymous-namespace tag: `_GLOBAL__N__<8 hex>_<len>_<file stem>_<8 hex>`.
_ANON = re.compile(r"_GLOBAL__N__[0-9a-f]{8}_(\d+_\w+?)_[0-9a-f]{8}")
# `-rdc` static prefix `__nv_static_<n>__<hash>_<len>_<stem>_<hash>_`; the next `_` starts `_Z...`.
_NV_STATIC = re.compile(r"__nv_static_\d+__[0-9a-f]{8}_\d+_\w+?_[0-9a-f]{8}_")


def normalise_mangled(name: str) -> str:
    """Remove the `-rdc` static prefix and zero the anonymous-namespace hashes.

    Zeroing (rather than removing) keeps every length prefix of the mangled name valid, so the result still
    demangles.
    """
    name = _NV_STATIC.sub("", name)
    return _ANON.sub(lambda m: f"_GLOBAL__N__00000000_{m.group(1)}_00000000", name)


def _demangle_cxxfilt(cxxfilt: str, names: Sequence[str]) -> list[str] | None:
    try:
        proc = subprocess.run(
            [cxxfilt],
            input="\n".join(names) + "\n",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    out = proc.stdout.splitlines()
    if proc.returncode != 0 or len(out) != len(names):
        return None
    return out


def _demangle_libstdcxx(names: Sequence[str]) -> list[str] | None:
    """`abi::__cxa_demangle` from libstdc++ through ctypes, for machines without c++filt."""
    path = ctypes.util.find_library("stdc++")
    libc_path = ctypes.util.find_library("c")
    if path is None or libc_path is None:
        return None
    try:
        lib, libc = ctypes.CDLL(path), ctypes.CDLL(libc_path)
        fn = lib.__cxa_demangle
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    libc.free.argtypes = [ctypes.c_void_p]
    out: list[str] = []
    for name in names:
        status = ctypes.c_int(0)
        ptr = fn(name.encode(), None, None, ctypes.byref(status))
        if status.value == 0 and ptr:
            out.append(ctypes.string_at(ptr).decode(errors="replace"))
            libc.free(ptr)
        else:
            out.append(name)  # status -2: not a mangled name (extern "C")
    return out


def demangle(names: Sequence[str], cxxfilt: str | None) -> dict[str, str]:
    """Mangled -> demangled, one batch. Names that are not mangled map to themselves."""
    unique = list(dict.fromkeys(names))
    if not unique:
        return {}
    result = _demangle_cxxfilt(cxxfilt, unique) if cxxfilt else None
    if result is None:
        result = _demangle_libstdcxx(unique)
    if result is None:
        result = unique
    return dict(zip(unique, result, strict=True))


@dataclass(frozen=True)
class KernelName:
    """One kernel's names: what ptxas printed, the stable mangled key and the readable signature."""

    raw: str  # exactly as ptxas / PTX / SASS spell it
    mangled: str  # normalised
    demangled: str  # normalised, e.g. "ops::add(float*, float const*)" or "gelu"

    @property
    def qualified(self) -> str:
        """The demangled name without parameter list or return type: "ops::add", "scale<float, 4>"."""
        return _strip_signature(self.demangled)

    @property
    def base(self) -> str:
        """The unqualified name without template arguments: "add", "scale"."""
        q = _strip_template_args(self.qualified)
        return q.rsplit("::", 1)[-1]


def _strip_signature(sig: str) -> str:
    """Drop a trailing `(params)` and a leading return type (`void scale<float, 4>(...)`)."""
    s = sig
    if s.endswith(")"):
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(s[i], 0)
            if depth == 0:
                s = s[:i]
                break
    # A return type is separated by a space at template depth 0 (templates print `void f<...>(...)`).
    depth = 0
    cut = -1
    for i, ch in enumerate(s):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == " " and depth == 0:
            cut = i
    return s[cut + 1 :] if cut >= 0 else s


def _strip_template_args(name: str) -> str:
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def kernel_names(raw_names: Iterable[str], cxxfilt: str | None) -> dict[str, KernelName]:
    """raw ptxas name -> KernelName, demangling everything in one batch."""
    raws = list(dict.fromkeys(raw_names))
    normalised = {r: normalise_mangled(r) for r in raws}
    table = demangle(list(normalised.values()), cxxfilt)
    return {r: KernelName(r, normalised[r], table.get(normalised[r], normalised[r])) for r in raws}


def _squash(s: str) -> str:
    return "".join(s.split())


def _level_names(k: KernelName, level: int) -> tuple[str, ...]:
    """The names a kernel answers to at one preference level (whitespace removed)."""
    if level == 0:
        return (k.raw, k.mangled)
    if level == 1:
        return (_squash(k.demangled),)
    # Qualified and base names share a level: `add` names both `::add` and `ops::add`, so it is ambiguous.
    return (_squash(k.qualified), _squash(k.base))


def select_entries(
    available: Sequence[KernelName], wanted: Sequence[str], *, kernel: str, source: str
) -> tuple[KernelName, ...]:
    """The kernels `entries` asks for, in the order asked. Empty `wanted` selects every kernel.

    An entry matches, in order of preference: the mangled name (raw or normalised), the full demangled
    signature, then the qualified name (`ops::add`, `scale<float, 4>`) or the base name (`add`, `scale`).
    Whitespace is ignored. A name matching several kernels at its best level is ambiguous, and one matching
    none is unknown: both are ConfigErrors that list the candidates.
    """
    if not wanted:
        return tuple(available)
    chosen: list[KernelName] = []
    for want in wanted:
        key = _squash(want)
        matches: list[KernelName] = []
        for level in range(3):
            matches = [k for k in available if key in _level_names(k, level)]
            if matches:
                break
        if not matches:
            listing = ", ".join(sorted(k.demangled for k in available)) or "(none)"
            raise ConfigError(
                f"kernel {kernel!r}: entry {want!r} is not a kernel in {source}; it has: {listing}"
            )
        if len(matches) > 1:
            listing = "; ".join(
                f"{k.demangled} [{k.mangled}]" for k in sorted(matches, key=lambda k: k.demangled)
            )
            raise ConfigError(
                f"kernel {kernel!r}: entry {want!r} is ambiguous in {source}: it matches {len(matches)} "
                f"kernels: {listing}. Name one by its full signature or mangled name as shown."
            )
        if matches[0] not in chosen:
            chosen.append(matches[0])
    return tuple(chosen)
