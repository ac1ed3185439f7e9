"""Which dims a tile case puts at their declared max: every drawn dim whose size varies, once per op and dtype.

The tile cases of a dtype take the dims in turn, the k-th tile case the k-th dim of `dims_at_max`: the dims that
shape the rows first (the last dim of a 2-D or larger input, and every dim an op sums over: those missing from
the declared output, a loss's vocabulary included), then the others, each in declaration order. The dim at its
max is the last the element cap shrinks (fuzz/shapes.py), and a dtype whose planned cases hold fewer tile cases
than the op has such dims gets more (plan/expand.py), so a loop over chunks of any declared dim, kept by the
output or reduced away, is drawn past its last chunk in every dtype.
"""

from __future__ import annotations

from gpuemu_ci.config.dimgraph import Schema, schema_of
from gpuemu_ci.config.model import OpSpec


def row_dims(op: OpSpec, schema: Schema) -> frozenset[str]:
    """Drawn dims that shape the rows: what the last dim of a 2-D (or larger) input, and the dims an op sums
    over (in the inputs but not in the declared output), are made of. (A 1-D input, a bias or the targets of
    a loss, is one value per row: its dim counts the rows.)"""
    wanted: set[str] = set()
    output = {d for d in op.shapes.output_dims or () if isinstance(d, str)}
    for spec in op.shapes.inputs:
        named = [d for d in spec.dims if isinstance(d, str)]
        if named and len(spec.dims) >= 2:
            wanted.add(named[-1])
        if op.shapes.output_dims is not None:
            wanted.update(d for d in named if d not in output)
    return frozenset(n for name in wanted for n in free_roots(schema, name))


def free_roots(schema: Schema, name: str) -> set[str]:
    """The drawn dims a value depends on (itself, when drawn)."""
    if name in schema.free_dims:
        return {name}
    roots: set[str] = set()
    for dep in schema.deps(name):
        roots |= free_roots(schema, dep)
    return roots


def dims_at_max(op: OpSpec, schema: Schema | None = None) -> tuple[str, ...]:
    """The drawn dims whose size varies, in the order successive tile cases of a dtype put them at their max."""
    schema = schema or schema_of(op.name, op.shapes, op.line)
    rows = row_dims(op, schema)
    varying = [
        name
        for name in schema.free_dims
        if schema.dims[name].max_expr is not None or schema.dims[name].high > schema.dims[name].low
    ]
    return (*(n for n in varying if n in rows), *(n for n in varying if n not in rows))


def declared_maxima(op: OpSpec) -> dict[str, int]:
    """The declared max of each dim of `dims_at_max` whose max is a number (not an expression over other
    dims): what the coverage compares the largest size that ran with."""
    schema = schema_of(op.name, op.shapes, op.line)
    return {
        name: schema.dims[name].high for name in dims_at_max(op, schema) if schema.dims[name].max_expr is None
    }
