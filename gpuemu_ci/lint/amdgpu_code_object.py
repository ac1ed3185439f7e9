"""Parser for `llvm-readelf --notes --symbols --wide` on an AMDGPU code object (code object v3 and later).

Two parts of the output are read:

- the symbol tables: each function's address and size, which bound its code in the disassembly (llvm-objdump
  runs a function on to the next symbol, so the last one would otherwise take the padding after it);
- the `NT_AMDGPU_METADATA` note, which llvm-readelf prints as YAML between `---` and `...`: per kernel
  (`amdhsa.kernels`) what the runtime is told: `.vgpr_count`, `.agpr_count`, `.sgpr_count`, the spill counts,
  `.private_segment_fixed_size` (scratch per lane), `.group_segment_fixed_size` (static LDS),
  `.wavefront_size`, `.max_flat_workgroup_size`, `.kernarg_segment_size`, `.uses_dynamic_stack`; and the
  target (`amdhsa.target: amdgcn-amd-amdhsa--gfx90a`).

Fields this parser does not know are kept per kernel in `unparsed` (by name), never dropped and never fatal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

_SYMBOL = re.compile(
    r"^\s*\d+:\s+(?P<value>[0-9a-fA-F]+)\s+(?P<size>\d+)\s+(?P<type>\w+)\s+\w+\s+\w+\s+\S+\s+(?P<name>\S+)\s*$"
)
_TARGET = re.compile(r"^amdgcn-amd-amdhsa--(?P<arch>gfx[0-9a-f]+(?::[a-z]+[+-])*)$")

# .field -> KernelNote attribute (all integers)
_INTEGERS = {
    ".vgpr_count": "vgprs",
    ".agpr_count": "agprs",
    ".sgpr_count": "sgprs",
    ".vgpr_spill_count": "vgpr_spills",
    ".sgpr_spill_count": "sgpr_spills",
    ".private_segment_fixed_size": "scratch_bytes",
    ".group_segment_fixed_size": "lds_bytes",
    ".wavefront_size": "wavefront_size",
    ".max_flat_workgroup_size": "max_flat_workgroup_size",
    ".kernarg_segment_size": "kernarg_bytes",
}
# Known fields that carry nothing the lint reports (kept out of `unparsed`, which lists what is new).
_KNOWN = {
    ".name",
    ".symbol",
    ".args",
    ".uses_dynamic_stack",
    ".kernarg_segment_align",
    ".language",
    ".language_version",
    ".reqd_workgroup_size",
    ".workgroup_size_hint",
    ".vec_type_hint",
    ".device_enqueue_symbol",
    ".kind",
    ".uniform_work_group_size",
    ".workgroup_processor_mode",
}


class CodeObjectError(ValueError):
    """The output holds no AMDGPU metadata that can be read."""


@dataclass(frozen=True)
class KernelNote:
    """One kernel's entry of the metadata note. None: the note did not carry the field."""

    name: str  # the kernel's symbol (mangled)
    symbol: str | None  # its kernel descriptor, "<name>.kd"
    vgprs: int | None  # .vgpr_count: on gfx90a and later VGPRs and AGPRs of the unified file together
    agprs: int | None
    sgprs: int | None
    vgpr_spills: int | None
    sgpr_spills: int | None
    scratch_bytes: int | None
    lds_bytes: int | None
    wavefront_size: int | None
    max_flat_workgroup_size: int | None
    kernarg_bytes: int | None
    dynamic_stack: bool | None
    unparsed: tuple[str, ...] = ()


@dataclass(frozen=True)
class CodeObject:
    """What llvm-readelf says about one code object."""

    arch: str | None  # "gfx90a" (with target features, "gfx90a:xnack+", when the object has them)
    kernels: tuple[KernelNote, ...]
    functions: dict[str, tuple[int, int]]  # symbol -> (address, size in bytes), FUNC symbols only

    def kernel(self, name: str) -> KernelNote | None:
        """The metadata note of kernel `name` (its symbol), or None when the code object has no such
        kernel."""
        return next((k for k in self.kernels if k.name == name), None)


def _metadata_yaml(text: str) -> str | None:
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.strip() == "---"), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].strip() == "..."), len(lines))
    return "\n".join(lines[start + 1 : end])


def _integer(value: Any) -> int | None:
    return int(value) if isinstance(value, str) and value.isdigit() else None


def _kernel(entry: dict[str, Any]) -> KernelNote:
    values: dict[str, int | None] = {attr: _integer(entry.get(key)) for key, attr in _INTEGERS.items()}
    dynamic = {"true": True, "false": False}.get(str(entry.get(".uses_dynamic_stack")))
    unparsed = tuple(sorted(k for k in entry if k not in _INTEGERS and k not in _KNOWN))
    return KernelNote(
        name=str(entry[".name"]),
        symbol=str(entry[".symbol"]) if ".symbol" in entry else None,
        dynamic_stack=dynamic,
        unparsed=unparsed,
        **values,
    )


def parse_readelf(text: str) -> CodeObject:
    """The metadata note and function symbols of `llvm-readelf --notes --symbols --wide` output.

    Raises CodeObjectError when there is no metadata note, or it is not the YAML of a kernel list."""
    body = _metadata_yaml(text)
    if body is None:
        raise CodeObjectError("llvm-readelf printed no AMDGPU metadata note (is this an AMDGPU code object?)")
    try:  # every scalar read as text (a kernel named `null` or `1e5` stays a name)
        document = yaml.load(body, Loader=yaml.BaseLoader)
    except yaml.YAMLError as exc:
        raise CodeObjectError(f"the AMDGPU metadata note is not valid YAML: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("amdhsa.kernels", []), list):
        raise CodeObjectError("the AMDGPU metadata note has no amdhsa.kernels list")
    kernels = []
    for entry in document.get("amdhsa.kernels", []):
        if not isinstance(entry, dict) or ".name" not in entry:
            raise CodeObjectError("an amdhsa.kernels entry has no .name")
        kernels.append(_kernel(entry))
    target = _TARGET.match(str(document.get("amdhsa.target", "")))
    functions: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        m = _SYMBOL.match(line)
        if m is not None and m.group("type") == "FUNC":
            functions[m.group("name")] = (int(m.group("value"), 16), int(m.group("size")))
    return CodeObject(target.group("arch") if target else None, tuple(kernels), functions)
