"""Mutation operators for Triton kernels: each one change, on the kernel's AST, of a kind real kernels have
shipped with. An operator yields every place it applies in a kernel, as a `Change` of the file's text; a new
operator is one class here plus one line in `OPERATORS` (and its paragraph in docs/mutate.md)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from gpuemu_ci.mutate.kernel import MEMORY_CALLS, Kernel, keyword, pointer_base, tl_call
from gpuemu_ci.mutate.source import Change, Span

_FLIP: dict[type[ast.cmpop], tuple[type[ast.cmpop], str]] = {
    ast.Lt: (ast.LtE, "<="),
    ast.LtE: (ast.Lt, "<"),
    ast.Gt: (ast.GtE, ">="),
    ast.GtE: (ast.Gt, ">"),
}
_ATOMIC_ELEMENT = (ast.Name, ast.Attribute, ast.Subscript, ast.Call, ast.Constant)


def _operand(kernel: Kernel, node: ast.expr) -> str:
    """The node's text, parenthesised unless it binds tighter than any binary operator."""
    text = kernel.text(node)
    return text if isinstance(node, _ATOMIC_ELEMENT) else f"({text})"


def _constant(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) or (
        isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant)
    )


def _replace(node: ast.AST, new: str) -> Change:
    return Change(Span.of(node), new)


@dataclass(frozen=True)
class Operator:
    """One kind of change. `name` identifies it (results, --operator); `models` says which bug it stands for."""

    name: ClassVar[str]
    models: ClassVar[str]

    def changes(self, kernel: Kernel) -> Iterator[Change]:
        """Every place this operator applies in `kernel`, as a change of the file's text; each change alone
        makes one mutant. Yields nothing where the operator does not apply."""
        raise NotImplementedError


class BoundFlipped(Operator):
    """Flips each single comparison of the kernel (`<` and `<=`, `>` and `>=`) unless both sides are
    constants."""

    name = "bound_flipped"
    models = (
        "a bounds comparison loosened or tightened (`<` ↔ `<=`): the tail lane read or written past "
        "the end, or dropped"
    )

    def changes(self, kernel: Kernel) -> Iterator[Change]:
        for node in kernel.walk():
            if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _FLIP:
                left, right = node.left, node.comparators[0]
                if _constant(left) and _constant(right):
                    continue
                symbol = _FLIP[type(node.ops[0])][1]
                yield _replace(node, f"{kernel.text(left)} {symbol} {kernel.text(right)}")


class BoundShifted(Operator):
    """Subtracts one from the right-hand side of each `<` or `<=` comparison whose bound is not a constant."""

    name = "bound_shifted"
    models = "a bound off by one (`cols < n` → `cols < n - 1`): the last element of every row never handled"

    def changes(self, kernel: Kernel) -> Iterator[Change]:
        for node in kernel.walk():
            if (
                isinstance(node, ast.Compare)
                and len(node.ops) == 1
                and isinstance(node.ops[0], ast.Lt | ast.LtE)
            ):
                right = node.comparators[0]
                if not _constant(right):
                    yield _replace(right, f"{_operand(kernel, right)} - 1")


class OtherDropped(Operator):
    """Removes the `other=` argument of each `tl.load` that has one (the mask stays)."""

    name = "other_dropped"
    models = "a masked load without `other=`: the masked-off lanes hold whatever the register held"

    def changes(self, kernel: Kernel) -> Iterator[Change]:
        for call in kernel.calls("load"):
            other = keyword(call, "other")
            if other is None:
                continue
            before = [n for n in (*call.args, *call.keywords) if n is not other and _ends_before(n, other)]
            if not before:
                continue
            start = max((Span.of(n) for n in before), key=lambda span: (span.end_line, span.end_col))
            end = Span.of(other)
            yield Change(Span(start.end_line, start.end_col, end.end_line, end.end_col), "")


def _ends_before(node: ast.AST, other: ast.AST) -> bool:
    return (getattr(node, "end_lineno", 0), getattr(node, "end_col_offset", 0)) <= (
        other.lineno,  # type: ignore[attr-defined]
        other.col_offset,  # type: ignore[attr-defined]
    )


class OtherZeroed(Operator):
    """Replaces a `tl.load`'s non-zero `other=` value by `0.0`."""

    name = "other_zeroed"
    models = (
        "masked lanes padded with 0 where the reduction needs another value (−inf before a max or an exp)"
    )

    def changes(self, kernel: Kernel) -> Iterator[Change]:
        for call in kernel.calls("load"):
            other = keyword(call, "other")
            if other is not None and not (isinstance(other.value, ast.Constant) and other.value.value == 0):
                yield _replace(other.value, "0.0")


class AccumulatorReset(Operator):
    """Turns each `acc += x` inside a loop into `acc = x`."""

    name = "accumulator_reset"
    models = "`acc += x` written `acc = x` in a loop: only the last block counts"

    def changes(self, kernel: Kernel) -> Iterator[Change]:
        for node in kernel.walk():
            if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and kernel.in_loop(node):
                yield _replace(node, f"{kernel.text(node.target)} = {kernel.text(node.value)}")


class OffsetShifted(Operator):
    """Adds one to the pointer argument of each memory call (`tl.load`, `tl.store`, the atomics)."""

    name = "offset_shifted"
    models = "a pointer offset off by one: every lane reads or writes its neighbour's element"

    def changes(self, kernel: Kernel) -> Iterator[Change]:
        for call in kernel.calls(MEMORY_CALLS):
            if call.args:
                pointer = call.args[0]
                text = kernel.text(pointer)
                yield _replace(
                    pointer, f"{text} + 1" if isinstance(pointer, ast.BinOp | ast.Name) else f"({text}) + 1"
                )


class StrideSwapped(Operator):
    """Replaces each use of a stride parameter (a parameter named `*stride*`) by the next one; needs two or
    more."""

    name = "stride_swapped"
    models = "one stride used where another belongs: right for contiguous inputs only, or for square ones"

    def changes(self, kernel: Kernel) -> Iterator[Change]:
        strides = [p for p in kernel.params if "stride" in p.lower()]
        if len(strides) < 2:
            return
        for node in kernel.walk():
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in strides:
                other = strides[(strides.index(node.id) + 1) % len(strides)]
                yield _replace(node, other)


class AccumulatorNarrowed(Operator):
    """Replaces `tl.float32` in `tl.zeros`/`tl.full` and in `.to(...)`/`.cast(...)` by the element type of the
    loaded pointer (or the kernel's first pointer)."""

    name = "accumulator_narrowed"
    models = (
        "a float32 accumulator or upcast narrowed to the input's dtype: fp16/bf16 sums lose their precision"
    )

    def changes(self, kernel: Kernel) -> Iterator[Change]:
        if not kernel.pointers:
            return
        for node in kernel.walk():
            if not isinstance(node, ast.Call):
                continue
            if tl_call(node, ("zeros", "full")):
                dtype = keyword(node, "dtype")
                target = (
                    dtype.value if dtype is not None else (node.args[-1] if len(node.args) >= 2 else None)
                )
                if target is not None and _is_float32(target):
                    yield _replace(target, f"{kernel.pointers[0]}.dtype.element_ty")
            elif (
                isinstance(node.func, ast.Attribute)
                and node.func.attr in ("to", "cast")
                and node.args
                and _is_float32(node.args[0])
            ):
                receiver = node.func.value
                loaded = isinstance(receiver, ast.Call) and tl_call(receiver, "load") and receiver.args
                base = pointer_base(receiver.args[0]) if loaded else None  # type: ignore[attr-defined]
                yield _replace(node.args[0], f"{base or kernel.pointers[0]}.dtype.element_ty")


def _is_float32(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "float32"


class TermDropped(Operator):
    """Replaces each `a + b` or `a - b` outside address arithmetic, neither side a constant, by `a`."""

    name = "term_dropped"
    models = (
        "a term dropped from a sum (`a + b` → `a`): an epsilon, a bias, a residual or a chain-rule term lost"
    )

    def changes(self, kernel: Kernel) -> Iterator[Change]:
        skipped = kernel.addressing()
        for node in kernel.walk():
            if (
                (
                    isinstance(node, ast.BinOp)
                    and isinstance(node.op, ast.Add | ast.Sub)
                    and id(node) not in skipped
                )
                and not _constant(node.right)
                and not _constant(node.left)
            ):
                yield _replace(node, kernel.text(node.left))


class RescaleDropped(Operator):
    """In a loop, drops `acc *= s` and the `acc * s` of `acc = acc * s (+ ...)`, leaving the running value
    unscaled."""

    name = "rescale_dropped"
    models = (
        "the rescale of a running value dropped in a loop (online softmax's `acc * alpha`): right "
        "while the max never moves"
    )

    def changes(self, kernel: Kernel) -> Iterator[Change]:
        for node in kernel.walk():
            if not kernel.in_loop(node):
                continue
            if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Mult):
                target = kernel.text(node.target)
                yield _replace(node, f"{target} = {target}")
            elif (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                name = node.targets[0].id
                scaled = (
                    node.value.left
                    if isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Add)
                    else node.value
                )
                if (
                    isinstance(scaled, ast.BinOp)
                    and isinstance(scaled.op, ast.Mult)
                    and isinstance(scaled.left, ast.Name)
                    and scaled.left.id == name
                ):
                    yield _replace(scaled, name)


class ProgramIdSwapped(Operator):
    """Swaps the constant axes of the kernel's `tl.program_id` calls (each to the next axis the kernel uses);
    needs two axes."""

    name = "program_id_swapped"
    models = "`program_id` axes swapped: right only when the grid is square"

    def changes(self, kernel: Kernel) -> Iterator[Change]:
        sites = []
        for call in kernel.calls("program_id"):
            named = keyword(call, "axis")
            axis = call.args[0] if call.args else (named.value if named is not None else None)
            if isinstance(axis, ast.Constant) and isinstance(axis.value, int):
                sites.append((axis, axis.value))
        axes = sorted({value for _, value in sites})
        if len(axes) < 2:
            return
        for node, value in sites:
            yield _replace(node, str(axes[(axes.index(value) + 1) % len(axes)]))


class WhereRemoved(Operator):
    """Replaces each three-argument `tl.where(cond, x, y)` by `x`."""

    name = "where_removed"
    models = (
        "the `tl.where` that masks lanes before a reduction removed: padding or garbage reaches the result"
    )

    def changes(self, kernel: Kernel) -> Iterator[Change]:
        for call in kernel.calls("where"):
            if len(call.args) == 3:
                yield _replace(call, kernel.text(call.args[1]))


class BlockForSize(Operator):
    """Replaces a runtime size parameter used as a divisor, modulus or loop bound by the kernel's first
    constexpr block size."""

    name = "block_for_size"
    models = (
        "the constexpr block size used where the runtime size belongs (`/ BLOCK` for `/ N`): exact "
        "when N is a power of two"
    )

    def changes(self, kernel: Kernel) -> Iterator[Change]:
        blocks = kernel.block_sizes
        sizes = {
            p
            for p in kernel.params
            if p not in kernel.constexprs and p not in kernel.pointers and "stride" not in p.lower()
        }
        if not blocks or not sizes:
            return
        for node in kernel.walk():
            used = None
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div | ast.FloorDiv | ast.Mod):
                used = node.right
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("range", "static_range")
                and len(node.args) >= 2
            ):
                used = node.args[1]
            elif tl_call(node, "range") and len(node.args) >= 2:  # type: ignore[attr-defined]
                used = node.args[1]  # type: ignore[attr-defined]
            if isinstance(used, ast.Name) and used.id in sizes:
                yield _replace(used, blocks[0])


class AtomicToStore(Operator):
    """Replaces each `tl.atomic_add(pointer, value[, mask])` call by a `tl.store` of the same pointer, value
    and mask."""

    name = "atomic_to_store"
    models = "an `atomic_add` turned into a plain store: programs that add into the same place overwrite each other"

    def changes(self, kernel: Kernel) -> Iterator[Change]:
        for call in kernel.calls("atomic_add"):
            if len(call.args) < 2:
                continue
            assert isinstance(call.func, ast.Attribute)
            parts = [kernel.text(call.args[0]), kernel.text(call.args[1])]
            mask = keyword(call, "mask")
            if len(call.args) >= 3:
                parts.append(f"mask={kernel.text(call.args[2])}")
            elif mask is not None:
                parts.append(f"mask={kernel.text(mask.value)}")
            yield _replace(call, f"{kernel.text(call.func.value)}.store({', '.join(parts)})")


OPERATORS: tuple[Operator, ...] = (
    BoundFlipped(),
    BoundShifted(),
    OtherDropped(),
    OtherZeroed(),
    AccumulatorReset(),
    OffsetShifted(),
    StrideSwapped(),
    AccumulatorNarrowed(),
    TermDropped(),
    RescaleDropped(),
    ProgramIdSwapped(),
    WhereRemoved(),
    BlockForSize(),
    AtomicToStore(),
)
