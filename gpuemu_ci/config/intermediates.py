"""`[ops.intermediates]`: quantities an op computes itself from exact values, in a precision of its own.

    [ops.intermediates.angle]        # RoPE: angle = position * inv_freq, computed in float32
    effect = "rotation"
    max = "T + position_offset"      # the largest |angle|, over the case's dims and kwargs

    [ops.intermediates.inv_n]        # a mean's 1 / n, computed in bfloat16
    effect = "scale"
    dtype = "bfloat16"

Each entry is checked here (the effect, the dtype, the names `max` reads), so a run never starts on a bound it
cannot compute; oracle/declared_intermediates.py turns them into allowance.
"""

from __future__ import annotations

from gpuemu_ci import dtypes
from gpuemu_ci.config.expressions import LaunchError, parse_expression
from gpuemu_ci.config.model import Intermediate, IntermediateEffect, OpShapes
from gpuemu_ci.config.reader import TableReader
from gpuemu_ci.config.schema import canonical_dtype, check_dtype

KEYS = ("effect", "dtype", "max")
NEEDS_MAX = frozenset({IntermediateEffect.ROTATION})


def parse_intermediates(table: TableReader, shapes: OpShapes) -> tuple[Intermediate, ...]:
    """The op's `[ops.intermediates]` entries, in the order they are declared."""
    section = table.table("intermediates")
    if section is None:
        return ()
    found = []
    for name in section.names():
        entry = section.table(name)
        assert entry is not None
        entry.expect_keys(KEYS)
        effect = entry.raw("effect")
        if effect is None:
            raise entry.error(
                "effect", f'needs `effect = "rotation"` or `"scale"` (how `{name}` moves the output)'
            )
        chosen = entry.choice("effect", IntermediateEffect, IntermediateEffect.SCALE)
        dtype = entry.string("dtype")
        if dtype is not None:
            check_dtype(dtype, f"{entry.where}.dtype", entry.source, entry.line_of("dtype"))
            dtype = canonical_dtype(dtype)
            if not dtypes.info(dtype).is_float:
                raise entry.error("dtype", f"{dtype} is not a floating-point dtype")
        largest = entry.string("max")
        if largest is None and chosen in NEEDS_MAX:
            raise entry.error(
                "max",
                f'effect = "{chosen.value}" needs `max`: the largest |{name}|, an expression over the dims and '
                'kwargs (e.g. "T + position_offset" for angles from positions)',
            )
        if largest is not None:
            allowed = {d.name for d in shapes.dims} | {k for k, _ in shapes.kwargs}
            allowed |= {k for k, _ in shapes.kwarg_bindings}
            try:
                parse_expression(largest, allowed)
            except LaunchError as exc:
                raise entry.error("max", f"{exc} (dims and kwargs: {', '.join(sorted(allowed))})") from None
        entry.finish()
        found.append(Intermediate(str(name), chosen, dtype, largest))
    section.finish()
    return tuple(found)
