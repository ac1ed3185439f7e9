"""Mutation operators for CUDA `[[kernels]]` sources, at the token level: the bug classes of the Triton
operators that CUDA C++ shares (a bounds check off by one, an accumulator reset or narrowed, an index off by
one, an atomic turned into a store) and one of its own (a barrier removed). Each yields its changes of the
`__global__`/`__device__` functions of a file, as `Change`s of the file's text; a new operator is one class
here plus one line in `OPERATORS` (and its row in docs/mutate.md)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from gpuemu_ci.mutate.cuda_source import Function, Token, depth_zero, matching
from gpuemu_ci.mutate.source import Change, SourceFile, Span

_FLIP = {"<": "<=", "<=": "<", ">": ">=", ">=": ">"}
_RELATIONS = frozenset((*_FLIP, "==", "!="))
# Where an operand ends: a closing bracket or a separator at its own depth.
_OPERAND_END = frozenset((";", ",", "&&", "||", "?", ":", "=", "+=", "-=", "*=", "/="))
# Operators that bind at least as tightly as `+`: an index made only of these takes `+ 1` unparenthesised.
_TIGHT = frozenset(("+", "-", "*", "/", "%", ".", "->", "::", "!", "~", "++", "--"))
_STATEMENT_START = frozenset((";", "{", "}", ")", "else", ":"))
_BARRIERS = ("__syncthreads", "__syncwarp")
# Rounds a float variable to fp16 and back in place: what an accumulator held in half precision keeps after
# each addition. Inline PTX, so the mutant needs no header the file may not include.
_ROUND_TO_HALF = 'asm("{{.reg .b16 h; cvt.rn.f16.f32 h, %0; cvt.f32.f16 %0, h;}}" : "+f"({name}));'


@dataclass(frozen=True)
class CudaOperator:
    """One kind of change. `name` identifies it (results, --operator); `models` says which bug it stands for."""

    name: ClassVar[str]
    models: ClassVar[str]

    def changes(self, function: Function, source: SourceFile) -> Iterator[Change]:
        """Every place this operator applies in `function` of `source`, as a change of the file's text; each
        change alone makes one mutant. Yields nothing where the operator does not apply."""
        raise NotImplementedError


def _text(source: SourceFile, first: Token, last: Token) -> str:
    return source.span_text(_span(first, last))


def _span(first: Token, last: Token) -> Span:
    return Span(first.span.line, first.span.col, last.span.end_line, last.span.end_col)


def _operand_end(function: Function, start: int) -> int:
    """The index of the last token of the operand that starts at `start` (it stops at a separator or a
    closing bracket at its own depth)."""
    for token in depth_zero(function.tokens, start, function.body.stop):
        if token.text in (")", "]", "}", *_OPERAND_END) or _compares(function, token.index):
            return token.index - 1
    return function.body.stop - 1


def _compares(function: Function, index: int) -> bool:
    return function.tokens[index].text in _RELATIONS and index not in function.templates


def _comparisons(function: Function) -> Iterator[Token]:
    """The `<`, `<=`, `>`, `>=` tokens that compare (not template brackets), both sides not literals."""
    tokens = function.tokens
    for token in function.walk():
        if token.text not in _FLIP or token.index in function.templates:
            continue
        before, after = tokens[token.index - 1], tokens[token.index + 1]
        if before.kind == "number" and after.kind == "number":
            continue
        yield token


class BoundFlipped(CudaOperator):
    """Flips each relational comparison of the function (`<` and `<=`, `>` and `>=`); template brackets are
    left alone."""

    name = "bound_flipped"
    models = (
        "a bounds check loosened or tightened (`i < n` ↔ `i <= n`): the element past the end touched, or "
        "the last one dropped"
    )

    def changes(self, function: Function, source: SourceFile) -> Iterator[Change]:
        for token in _comparisons(function):
            yield Change(token.span, _FLIP[token.text])


class BoundShifted(CudaOperator):
    """Subtracts one from the right-hand side of each `<` or `<=` comparison whose bound is not a literal
    number."""

    name = "bound_shifted"
    models = "a bound off by one (`i < n` → `i < n - 1`): the last element never handled"

    def changes(self, function: Function, source: SourceFile) -> Iterator[Change]:
        tokens = function.tokens
        for token in _comparisons(function):
            if token.text not in ("<", "<="):
                continue
            start, end = token.index + 1, _operand_end(function, token.index + 1)
            if end < start or (start == end and tokens[start].kind == "number"):
                continue
            text = _text(source, tokens[start], tokens[end])
            shifted = f"{text} - 1" if start == end else f"({text}) - 1"
            yield Change(_span(tokens[start], tokens[end]), shifted)


def _loop_controls(function: Function) -> frozenset[str]:
    """Names tested in a loop's condition: `i += stride` on them is the loop's step, not an accumulation."""
    names: set[str] = set()
    tokens = function.tokens
    for token in function.walk():
        if token.text in ("for", "while") and tokens[token.index + 1].text == "(":
            close = matching(tokens, token.index + 1)
            names.update(t.text for t in tokens[token.index + 2 : close] if t.kind == "name")
    return frozenset(names)


def _accumulations(function: Function) -> Iterator[tuple[Token, Token, int]]:
    """(target, `+=`, the index of the statement's `;`) for every `name += expr;` statement in a loop body,
    the target not one of the loop's control variables."""
    tokens, controls = function.tokens, _loop_controls(function)
    for token in function.walk():
        if token.text != "+=" or not function.in_loop(token):
            continue
        target = tokens[token.index - 1]
        if target.kind != "name" or target.text in controls:
            continue
        if tokens[target.index - 1].text not in _STATEMENT_START:
            continue
        end = _operand_end(function, token.index + 1) + 1
        if end < function.body.stop and tokens[end].text == ";":
            yield target, token, end


def _compound_targets(function: Function) -> Iterator[Token]:
    """Every `+=` in a loop body (not a `for` header's step), whatever its target."""
    controls = _loop_controls(function)
    for token in function.walk():
        if token.text == "+=" and function.in_loop(token):
            target = function.tokens[token.index - 1]
            if not (target.kind == "name" and target.text in controls):
                yield token


class AccumulatorReset(CudaOperator):
    """Turns each `+=` statement inside a loop body into `=` (a `for` header's step is left alone)."""

    name = "accumulator_reset"
    models = "`acc += x` written `acc = x` in a loop: only the last iteration counts"

    def changes(self, function: Function, source: SourceFile) -> Iterator[Change]:
        for token in _compound_targets(function):
            yield Change(token.span, "=")


class AccumulatorNarrowed(CudaOperator):
    """After each `acc += ...;` in a loop on a local `float`, rounds `acc` to fp16 and back (inline PTX, so
    the mutant needs no header)."""

    name = "accumulator_narrowed"
    models = "a `float` accumulator held in half precision: each partial sum rounded to fp16"

    def changes(self, function: Function, source: SourceFile) -> Iterator[Change]:
        floats = function.local_floats()
        tokens = function.tokens
        for target, _, end in _accumulations(function):
            if target.text in floats:
                statement = _text(source, target, tokens[end])
                rounded = _ROUND_TO_HALF.format(name=target.text)
                yield Change(_span(target, tokens[end]), f"{{ {statement} {rounded} }}")


def _shared_arrays(function: Function) -> tuple[frozenset[str], frozenset[int]]:
    """Names of the `__shared__` arrays the function declares, and the indices of their declarations."""
    names: set[str] = set()
    declared: set[int] = set()
    tokens = function.tokens
    for token in function.walk():
        if token.text != "__shared__":
            continue
        for index in range(token.index + 1, function.body.stop):
            if tokens[index].text in (";", "="):
                break
            if tokens[index].kind == "name" and tokens[index + 1].text == "[":
                names.add(tokens[index].text)
                declared.add(index)
                break
    return frozenset(names), frozenset(declared)


class OffsetShifted(CudaOperator):
    """Adds one to the index of each subscript of a pointer parameter or a `__shared__` array (declarations
    and members of the same name are left alone)."""

    name = "offset_shifted"
    models = "an index off by one (`x[i]` → `x[i + 1]`): every thread reads or writes its neighbour's element"

    def changes(self, function: Function, source: SourceFile) -> Iterator[Change]:
        tokens = function.tokens
        shared, declarations = _shared_arrays(function)
        arrays = function.pointers | shared
        for token in function.walk():
            if token.kind != "name" or token.text not in arrays or token.index in declarations:
                continue
            if tokens[token.index - 1].text in (".", "->", "::"):
                continue  # a member of the same name
            if token.index + 1 >= function.body.stop or tokens[token.index + 1].text != "[":
                continue
            close = matching(tokens, token.index + 1)
            if close <= token.index + 2 or close >= function.body.stop:
                continue
            first, last = tokens[token.index + 2], tokens[close - 1]
            index = _text(source, first, last)
            simple = _depth_zero_punctuators(tokens, first.index, last.index) <= _TIGHT
            yield Change(_span(first, last), f"{index} + 1" if simple else f"({index}) + 1")


def _depth_zero_punctuators(tokens: list[Token], first: int, last: int) -> set[str]:
    return {
        t.text for t in depth_zero(tokens, first, last + 1) if t.kind == "punct" and t.text not in ("(", "[")
    }


class BarrierRemoved(CudaOperator):
    """Comments out each `__syncthreads();` or `__syncwarp(...);` statement of the function."""

    name = "barrier_removed"
    models = (
        "a `__syncthreads()` (or `__syncwarp()`) removed: threads read shared memory before the others "
        "wrote it (a race)"
    )

    def changes(self, function: Function, source: SourceFile) -> Iterator[Change]:
        tokens = function.tokens
        for token in function.walk():
            if token.text not in _BARRIERS or tokens[token.index + 1].text != "(":
                continue
            close = matching(tokens, token.index + 1)
            if close + 1 < function.body.stop and tokens[close + 1].text == ";":
                call = _text(source, token, tokens[close])
                yield Change(_span(token, tokens[close]), f"/* removed: {call} */")


class AtomicToStore(CudaOperator):
    """Rewrites each `atomicAdd(address, value);` statement whose result is unused as the plain store
    `*address = value`."""

    name = "atomic_to_store"
    models = (
        "an `atomicAdd` turned into a plain store: threads that add into the same place overwrite each other"
    )

    def changes(self, function: Function, source: SourceFile) -> Iterator[Change]:
        tokens = function.tokens
        for token in function.walk():
            if token.text != "atomicAdd" or tokens[token.index + 1].text != "(":
                continue
            if tokens[token.index - 1].text not in _STATEMENT_START:
                continue  # its old value is used: not a plain accumulation
            close = matching(tokens, token.index + 1)
            if close + 1 >= function.body.stop or tokens[close + 1].text != ";":
                continue
            comma = _operand_end(function, token.index + 2) + 1
            if tokens[comma].text != ",":
                continue
            address = tokens[token.index + 2]
            if address.text == "&":
                where = _text(source, tokens[address.index + 1], tokens[comma - 1])
            else:
                where = f"*({_text(source, address, tokens[comma - 1])})"
            value = _text(source, tokens[comma + 1], tokens[close - 1])
            yield Change(_span(token, tokens[close]), f"{where} = {value}")


OPERATORS: tuple[CudaOperator, ...] = (
    BoundFlipped(),
    BoundShifted(),
    AccumulatorReset(),
    OffsetShifted(),
    AccumulatorNarrowed(),
    BarrierRemoved(),
    AtomicToStore(),
)
