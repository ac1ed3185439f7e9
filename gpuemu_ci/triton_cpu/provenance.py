"""Which kernel argument a pointer value was made from.

The interpreter's pointer values are bare addresses. Each argument's pointer is tagged with the argument's name
(in the interpreter's TensorHandle.attr), and the builder methods that make pointers from pointers (pointer
arithmetic, splats, broadcasts, reshapes, selects) pass the tag on: an access is then checked against the
argument it was made from alone, so a read past one tensor's end that lands in another argument's memory is
still out of bounds. A pointer of unknown origin (loaded from memory, made from an integer) is checked against
every argument.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuemu_ci.triton_cpu import active, sites
from gpuemu_ci.triton_cpu.boundary import Handle
from gpuemu_ci.triton_cpu.report import POINTER, Explained

if TYPE_CHECKING:
    from gpuemu_ci.triton_cpu.call import CallRecord, Launch

# The kernel argument a pointer value was made from (pointer arithmetic, splats, broadcasts, reshapes keep it),
# kept in the interpreter's TensorHandle.attr: its accesses are checked against that argument alone, so a read
# past one tensor's end that lands in another argument's memory is still out of bounds.
BASE = "gpuemu_base"
# In an explain re-run, the lines whose pointer arithmetic (`create_addptr`) made a pointer value, in order: an
# out-of-bounds finding then names where its pointer's offset was computed, not only the access.
OFFSET_AT = "gpuemu_offset_at"
MAX_OFFSET_LINES = 4
PROVENANCE = (
    "create_addptr",
    "create_splat",
    "create_unsplat",
    "create_broadcast",
    "create_expand_dims",
    "create_reshape",
    "create_trans",
    "create_cat",
    "create_join",
    "create_select",
)


def is_pointer(handle: Handle) -> bool:
    """Whether an interpreter handle holds pointers."""
    import triton.language as tl

    return isinstance(getattr(handle, "dtype", None), tl.pointer_type)


def derived(original: Any, name: str = "") -> Any:
    """A builder method whose pointer result keeps the argument its pointer operands came from (and, in an
    explain re-run, the lines whose pointer arithmetic made it)."""
    adds = (name or getattr(original, "__name__", "")) == "create_addptr"

    def derived(self: Any, *args: Any, **kwargs: Any) -> Any:
        made = original(self, *args, **kwargs)
        if not isinstance(getattr(made, "attr", None), dict):
            return made
        bases = {getattr(a, "attr", {}).get(BASE) for a in args if is_pointer(a)}
        if len(bases) == 1:
            base = bases.pop()
            if base is not None:
                made.attr[BASE] = base
        call = active.call()
        if call is not None and call.settings.log_stores:
            _offset(made, args, call.launch, adds)
        return made

    return derived


def _offset(made: Any, args: tuple[Any, ...], launch: Launch | None, adds: bool) -> None:
    """Keeps on `made` the lines whose pointer arithmetic its pointer operands came from, and this one's when it
    adds an offset (the line that pointer arithmetic runs on)."""
    lines = [line for a in args if is_pointer(a) for line in getattr(a, "attr", {}).get(OFFSET_AT, ())]
    if adds:
        lines.append(sites.site(launch))
    if lines:
        made.attr[OFFSET_AT] = tuple(dict.fromkeys(lines))[-MAX_OFFSET_LINES:]


def offset_at(handle: Handle) -> tuple[str, ...]:
    """The lines whose pointer arithmetic made these pointers, first first (noted in an explain re-run only)."""
    return tuple(getattr(handle, "attr", {}).get(OFFSET_AT, ()))


def base_of(handle: Handle) -> str | None:
    """The kernel argument the pointers were derived from, when known."""
    return getattr(handle, "attr", {}).get(BASE)


def note_fault(call: CallRecord, launch: Launch, access: str, pointers: Handle) -> None:
    """An access out of bounds in an explain re-run: the lines its pointer's offset was computed on, where one
    is not the access's own line."""
    site, lines = sites.site(launch), offset_at(pointers)
    if any(line != site for line in lines):
        said = (
            f"the {access}'s pointer was offset at {', then at '.join(lines)}, before its {access} at {site}"
        )
        call.explained.append(Explained(POINTER, lines[0], said))
