"""`required_patterns` / `forbidden_patterns` (and upstream's spellings `required_instructions` /
`forbidden_instructions`) -> PatternChecks, each with the listing it is matched against.

A pattern names its listing with `{ pattern, target }`; otherwise the way it is written decides. SASS opcodes
are upper case (`LDG.E.SYS`, `HMMA`, `MUFU.EX2`) and PTX's lower case (`ld.global.nc`, `fma.rn.f32`), so a
pattern that starts with a capital and holds no lower-case letter is a SASS mnemonic and one with a
lower-case letter is PTX. A pattern with no letters at all follows its key: `*_instructions` (machine
instructions) are matched against SASS, `*_patterns` against PTX. A SASS mnemonic is never searched for in
PTX, where it cannot occur.
"""

from __future__ import annotations

import re

from gpuemu_ci.config.model import PATTERN_TARGETS, KernelLanguage, PatternCheck
from gpuemu_ci.config.reader import TableReader

CUDA_TARGETS = PATTERN_TARGETS[KernelLanguage.CUDA]
# Upstream's spellings: each means the key it maps to, with its patterns machine instructions by default.
INSTRUCTION_ALIASES = {
    "required_instructions": "required_patterns",
    "forbidden_instructions": "forbidden_patterns",
}
_ESCAPE = re.compile(r"\\[A-Za-z]")  # \d, \s, \b ... are regex syntax, not letters of an opcode


def inferred_target(pattern: str, spelled: str) -> tuple[str, str]:
    """(target, why) for a pattern written without one, under the key spelled `spelled`."""
    letters = _ESCAPE.sub("", pattern.lstrip("^"))
    if re.match(r"[A-Z]", letters) and not re.search(r"[a-z]", letters):
        return "sass", "written as a SASS mnemonic"
    if re.search(r"[a-z]", letters):
        return "ptx", "written in lower case, as PTX is"
    if spelled in INSTRUCTION_ALIASES:
        return "sass", f"listed under `{spelled}`"
    return "ptx", f"listed under `{spelled}`"


def _target_for(pattern: str, spelled: str, targets: tuple[str, ...]) -> tuple[str, str]:
    if targets == CUDA_TARGETS:
        return inferred_target(pattern, spelled)
    # A HIP kernel: its listings are AMDGPU assembly (lower case) and LLVM IR; the first unless named.
    return targets[0], f"a HIP kernel's patterns are matched against its {targets[0]} listing"


def _refuse_target(table: TableReader, spelled: str, explicit: str, targets: tuple[str, ...]) -> None:
    shown = " or ".join(f'"{t}"' for t in targets)
    other = next((lang for lang, ts in PATTERN_TARGETS.items() if explicit in ts and ts != targets), None)
    why = f" ({explicit!r} is for {other.value.upper()} kernels)" if other is not None else ""
    raise table.error(spelled, f"target must be {shown}, got {explicit!r}{why}")


def parse_patterns(
    table: TableReader, key: str, targets: tuple[str, ...] = CUDA_TARGETS
) -> tuple[PatternCheck, ...]:
    """The patterns of `key` (either spelling), each a valid regex with its target among `targets` (the
    listings of the kernel's language)."""
    spelled, raw = table.spelled_raw(key, [])
    if not isinstance(raw, list):
        raise table.error(spelled, "expected a list of regexes or {pattern, target} tables")
    patterns = []
    for item in raw:
        if isinstance(item, str):
            target, why = _target_for(item, spelled, targets)
            check = PatternCheck(item, target, why)
        elif isinstance(item, dict):
            sub = TableReader(item, f"{table.where}.{spelled}[]", table.source, table.line_of(spelled))
            pattern = sub.string("pattern", required=True) or ""
            explicit = sub.string("target")
            sub.finish()
            if explicit is None:
                target, why = _target_for(pattern, spelled, targets)
                check = PatternCheck(pattern, target, why)
            elif explicit not in targets:
                _refuse_target(table, spelled, explicit, targets)
            else:
                check = PatternCheck(pattern, explicit)
        else:
            raise table.error(spelled, "expected a list of regexes or {pattern, target} tables")
        if not check.pattern:
            raise table.error(spelled, "an empty pattern matches every instruction")
        try:
            re.compile(check.pattern)
        except re.error as exc:
            raise table.error(spelled, f"invalid regex {check.pattern!r}: {exc}") from None
        patterns.append(check)
    return tuple(patterns)
