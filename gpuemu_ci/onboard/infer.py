"""An `[[ops]]` entry inferred from an op's recorded calls: which axes share a dim (their sizes agree in every
call), dims that are the product of two others (`H = KVH * G`), the dtypes seen, index inputs and their range,
parameters that were always contiguous, and the plain arguments as kwargs. What the calls cannot settle is said
in `notes`, to be written beside the entry."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuemu_ci import dtypes
from gpuemu_ci.errors import UsageError
from gpuemu_ci.onboard.facts import ArgFacts, CallFacts

FLOAT_DTYPES = ("float64", "float32", "float16", "bfloat16")
PARAMETER_NAMES = frozenset({"weight", "bias", "gamma", "beta", "w", "b", "scale", "shift", "norm_weight"})
FIRST_NAMES = {
    1: ("N",),
    2: ("M", "N"),
    3: ("B", "T", "D"),
    4: ("B", "H", "T", "D"),
    5: ("B", "H", "T", "D", "E"),
}
MORE_NAMES = tuple("KVCLPQRSUWXYZEFGIJA")
MAX_TYPICAL = 4


@dataclass(frozen=True)
class DimDraft:
    """A dim of the drafted op: its name, the sizes seen, and its expression when it is derived from
    others."""

    name: str
    sizes: tuple[int, ...]  # every size seen, ascending
    expr: str | None = None  # a derived dim: "KVH * G"


@dataclass(frozen=True)
class InputDraft:
    """An input of the drafted op as `[ops.inputs]` will declare it: its dims, dtype and kind when they are
    not the case's, value range, and why it was drafted so (`why`, shown as a comment)."""

    name: str
    dims: tuple[str, ...]
    dtype: str | None = None  # None: the case dtype
    kind: str | None = None  # "index" for integer inputs
    low: int | None = None
    high: int | str | None = None
    ignore_value: int | None = None
    contiguous_only: bool = False
    why: str = ""


@dataclass(frozen=True)
class OpDraft:
    """The `[[ops]]` entry drafted from recorded calls, before it is written as TOML: target, framework,
    dtypes, dims, inputs, outputs and the notes for the user."""

    name: str
    target: str
    framework: str
    calls: int
    dtypes: tuple[str, ...]
    dims: tuple[DimDraft, ...]
    inputs: tuple[InputDraft, ...]
    output: tuple[str, ...] | None = None  # the first output's dims, when they are not the first input's
    output_dtype: tuple[str, ...] = ()  # per output, when not the case dtype
    kwargs: dict[str, tuple[object, ...]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


Vector = tuple[int, ...]  # one axis's size in each call


def infer(name: str, target: str, calls: Sequence[CallFacts]) -> OpDraft:
    """The entry the calls support. Raises UsageError when they cannot make one (no call, no tensor)."""
    if not calls:
        raise UsageError(f"no call of {target} was recorded: did the command call it (through that name)?")
    notes: list[str] = []
    calls = _one_kind(calls, notes)
    tensors = _tensor_args(calls, notes)
    case_dtypes = _case_dtypes(calls, tensors)
    vectors = {(arg, axis): _axis_vector(calls, arg, axis) for arg in tensors for axis in range(tensors[arg])}
    groups = _group_axes(vectors)
    names = _name_dims(groups, tensors, vectors)
    derived = _derived_dims(groups, names, len(calls))
    dims = tuple(
        DimDraft(names[vector], tuple(sorted(set(vector))), derived.get(vector)) for vector in groups
    )
    if len(calls) == 1:
        notes.append(
            "one kind of call was recorded: axes of equal size were taken as one dim; record calls of several "
            "sizes to tell them apart"
        )
    inputs = tuple(
        _input(arg, rank, calls, vectors, names, case_dtypes, tensors) for arg, rank in tensors.items()
    )
    kwargs = _kwargs(calls, tensors, vectors, names, notes)
    output, output_dtype = _outputs(calls, vectors, names, inputs[0].dims, notes)
    frameworks = sorted(
        {f.framework for call in calls for f in call.args.values() if f.framework is not None}
    )
    framework = frameworks[0] if frameworks else "numpy"
    if len(frameworks) > 1:
        notes.append(f"calls mixed frameworks ({', '.join(frameworks)}): {framework} used")
    for arg in tensors:
        if any(not call.args[arg].contiguous for call in calls if arg in call.args):
            notes.append(f"`{arg}` was strided in real calls: the op handles strides, every layout is drawn")
    return OpDraft(
        name=name,
        target=target,
        framework=framework,
        calls=len(calls),
        dtypes=case_dtypes,
        dims=dims,
        inputs=inputs,
        output=output,
        output_dtype=output_dtype,
        kwargs=kwargs,
        notes=tuple(notes),
    )


def _ranks(call: CallFacts) -> tuple[tuple[str, int], ...]:
    return tuple((arg, len(f.shape)) for arg, f in call.args.items() if f.kind == "tensor")


def _one_kind(calls: Sequence[CallFacts], notes: list[str]) -> list[CallFacts]:
    """The calls whose inputs have the most common ranks (an entry gives each input one rank): the others are
    left out, and said so. Ties go to the higher ranks (`x` as [B, T, D] rather than [M, N])."""
    counts: dict[tuple[tuple[str, int], ...], int] = {}
    for call in calls:
        counts[_ranks(call)] = counts.get(_ranks(call), 0) + 1
    kind = max(counts, key=lambda ranks: (counts[ranks], sum(r for _, r in ranks)))
    kept = [call for call in calls if _ranks(call) == kind]
    if len(kept) < len(calls):
        shapes = ", ".join(f"`{arg}` of {rank} dims" for arg, rank in kind)
        notes.append(
            f"{len(calls) - len(kept)} of {len(calls)} kinds of call had inputs of other ranks and were left out; "
            f"the entry is for {shapes or 'calls without tensors'} (add the others as another op with --name)"
        )
    return kept


def _tensor_args(calls: Sequence[CallFacts], notes: list[str]) -> dict[str, int]:
    """Tensor arguments -> rank, in the function's order; one rank per argument across calls."""
    ranks: dict[str, set[int]] = {}
    for call in calls:
        for arg, facts in call.args.items():
            if facts.kind == "tensor":
                ranks.setdefault(arg, set()).add(len(facts.shape))
    if not ranks:
        raise UsageError("the recorded calls pass no arrays or tensors: there is nothing to fuzz")
    varying = {arg: sorted(r) for arg, r in ranks.items() if len(r) > 1}
    if varying:
        arg, seen = next(iter(varying.items()))
        raise UsageError(
            f"`{arg}` had {' and '.join(map(str, seen))} dims in different calls: an input has one rank in "
            "gpuemu.toml; record calls of one kind (or add each kind as its own op with --name)"
        )
    sometimes = [
        arg for arg in ranks if any(arg not in c.args or c.args[arg].kind != "tensor" for c in calls)
    ]
    for arg in sometimes:
        notes.append(f"`{arg}` was not a tensor in every call: it is fuzzed as one in every case")
    return {arg: next(iter(r)) for arg, r in ranks.items()}


def _case_dtypes(calls: Sequence[CallFacts], tensors: dict[str, int]) -> tuple[str, ...]:
    seen = []
    for call in calls:
        for arg in tensors:
            facts = call.args.get(arg)
            if facts is not None and facts.kind == "tensor" and facts.dtype in FLOAT_DTYPES:
                if facts.dtype not in seen:
                    seen.append(facts.dtype)
                break
    return tuple(d for d in FLOAT_DTYPES if d in seen) or ("float32",)


def _axis_vector(calls: Sequence[CallFacts], arg: str, axis: int) -> Vector:
    return tuple(
        call.args[arg].shape[axis] if arg in call.args and call.args[arg].kind == "tensor" else -1
        for call in calls
    )


def _group_axes(vectors: dict[tuple[str, int], Vector]) -> dict[Vector, list[tuple[str, int]]]:
    """Axes whose sizes agree in every call are one dim (in order of first appearance)."""
    groups: dict[Vector, list[tuple[str, int]]] = {}
    for slot, vector in vectors.items():
        groups.setdefault(vector, []).append(slot)
    return groups


def _name_dims(
    groups: dict[Vector, list[tuple[str, int]]],
    tensors: dict[str, int],
    vectors: dict[tuple[str, int], Vector],
) -> dict[Vector, str]:
    first = next(iter(tensors))
    names: dict[Vector, str] = {}
    for axis, name in enumerate(FIRST_NAMES.get(tensors[first], ())):
        names.setdefault(vectors[(first, axis)], name)
    spare = (n for n in MORE_NAMES if n not in names.values())
    for vector in groups:
        if vector not in names:
            names[vector] = next(spare, f"D{len(names)}")
    return names


def _derived_dims(
    groups: dict[Vector, list[tuple[str, int]]], names: dict[Vector, str], calls: int
) -> dict[Vector, str]:
    """Dims whose size is the product of two other dims' in every call, where the calls vary enough to say so."""
    if calls < 2:
        return {}
    derived: dict[Vector, str] = {}
    candidates = [v for v in groups if len(set(v)) > 1 or all(s > 1 for s in v)]
    for vector in groups:
        if len(set(vector)) < 2:
            continue
        for i, a in enumerate(candidates):
            for b in candidates[i:]:
                if vector in (a, b) or a in derived or b in derived:
                    continue
                if all(x * y == z for x, y, z in zip(a, b, vector, strict=True)):
                    derived[vector] = f"{names[a]} * {names[b]}"
                    break
            if vector in derived:
                break
    return derived


def _input(
    arg: str,
    rank: int,
    calls: Sequence[CallFacts],
    vectors: dict[tuple[str, int], Vector],
    names: dict[Vector, str],
    case_dtypes: tuple[str, ...],
    tensors: dict[str, int],
) -> InputDraft:
    dims = tuple(names[vectors[(arg, axis)]] for axis in range(rank))
    seen = [call.args[arg] for call in calls if arg in call.args and call.args[arg].kind == "tensor"]
    kinds = {f.dtype for f in seen}
    if all(d is not None and d.startswith(("int", "uint")) for d in kinds):
        return _index_input(arg, dims, seen, calls, vectors, names)
    fixed = None
    if (kinds and kinds.isdisjoint(case_dtypes)) or (len(kinds) == 1 and len(case_dtypes) > 1):
        fixed = next(iter(sorted(str(k) for k in kinds)))  # float32 weights beside bfloat16 activations
    first = next(iter(tensors))
    parameter = arg != first and (
        arg.lower() in PARAMETER_NAMES
        or (rank == 1 and dims[0] == names[vectors[(first, tensors[first] - 1)]])
    )
    if parameter and all(f.contiguous for f in seen):
        return InputDraft(
            arg, dims, dtype=fixed, contiguous_only=True, why="a parameter, contiguous in every recorded call"
        )
    return InputDraft(arg, dims, dtype=fixed)


def _index_input(
    arg: str,
    dims: tuple[str, ...],
    seen: list[ArgFacts],
    calls: Sequence[CallFacts],
    vectors: dict[tuple[str, int], Vector],
    names: dict[Vector, str],
) -> InputDraft:
    dtype = seen[0].dtype
    lows = [f.low for f in seen if f.low is not None]
    highs = [f.high for f in seen if f.high is not None]
    ignore = sorted({low for low in lows if low < 0})
    ignore_value = ignore[0] if len(ignore) == 1 else None
    top = max(highs) if highs else 0
    # The smallest dim larger than every value in every call: a vocabulary, a number of classes.
    per_call_max = [_high(call.args.get(arg)) for call in calls]
    bound: str | int = top + 1
    fitting = [
        v for v in dict.fromkeys(vectors.values()) if all(s > m for s, m in zip(v, per_call_max, strict=True))
    ]
    if fitting:
        bound = names[min(fitting, key=sum)]
    return InputDraft(
        arg,
        dims,
        dtype=dtype if dtype and dtypes.canonical(dtype) else "int64",
        kind="index",
        low=0,
        high=bound,
        ignore_value=ignore_value,
    )


def _high(facts: ArgFacts | None) -> int:
    return facts.high if facts is not None and facts.high is not None else 0


def _kwargs(
    calls: Sequence[CallFacts],
    tensors: dict[str, int],
    vectors: dict[tuple[str, int], Vector],
    names: dict[Vector, str],
    notes: list[str],
) -> dict[str, tuple[object, ...]]:
    kwargs: dict[str, tuple[object, ...]] = {}
    plain = [arg for arg in dict.fromkeys(a for call in calls for a in call.args) if arg not in tensors]
    for arg in plain:
        facts = [call.args[arg] for call in calls if arg in call.args]
        if any(f.kind == "other" for f in facts):
            kind = next(f.type_name for f in facts if f.kind == "other")
            notes.append(
                f"`{arg}` was a {kind}: only arrays and plain values are passed; wrap the op to build it"
            )
            continue
        values = [f.value for f in facts if f.kind == "scalar"]
        if not values:
            notes.append(f"`{arg}` was None in every call: left to the op's default")
            continue
        if any(f.kind == "none" for f in facts):
            notes.append(f"`{arg}` was None in some calls: only its other values are fuzzed")
        ints = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
        if len(ints) == len(values) == len(calls):
            sized = [v for v in vectors.values() if v == tuple(ints)]
            if sized and len(set(ints)) > 1:
                kwargs[arg] = (names[sized[0]],)  # the op is told a size it could read off a tensor
                continue
        kwargs[arg] = tuple(dict.fromkeys(values))[:MAX_TYPICAL]
    return kwargs


def _outputs(
    calls: Sequence[CallFacts],
    vectors: dict[tuple[str, int], Vector],
    names: dict[Vector, str],
    first_dims: tuple[str, ...],
    notes: list[str],
) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    calls = [call for call in calls if not call.raised]
    if not calls:
        notes.append(
            "every recorded call raised: declare `output` if the output's dims differ from the input's"
        )
        return None, ()
    outputs = [call.outputs for call in calls]
    counts = {len(o) for o in outputs}
    if counts == {0}:
        return None, ()
    if len(counts) != 1 or any(f.kind != "tensor" for o in outputs for f in o):
        notes.append("the op's outputs were not always the same number of tensors: check `output`")
        return None, ()
    shapes = [o[0].shape for o in outputs]
    if len({len(s) for s in shapes}) != 1:
        return None, ()
    by_vector = {v: names[v] for v in vectors.values()}
    dims = []
    for axis in range(len(shapes[0])):
        vector = tuple(s[axis] for s in shapes)
        if vector not in by_vector:
            notes.append(f"the output's axis {axis} matches no input dim: declare `output` by hand")
            return None, ()
        dims.append(by_vector[vector])
    per_output: tuple[str, ...] = ()
    first_case = [
        next((f.dtype for f in call.args.values() if f.kind == "tensor" and f.dtype in FLOAT_DTYPES), None)
        for call in calls
    ]
    out_dtypes = [tuple(f.dtype or "" for f in o) for o in outputs]
    if any(
        any(d != c for d in row if d in FLOAT_DTYPES) for row, c in zip(out_dtypes, first_case, strict=True)
    ):
        if len(set(out_dtypes)) == 1:
            per_output = out_dtypes[0]
        else:
            notes.append("the outputs' dtypes differ from the inputs' in varying ways: set `output_dtype`")
    return (tuple(dims) if tuple(dims) != first_dims else None), per_output
