"""What `gpuemu-ci add` infers from an op's recorded calls: shared and derived dims, dtypes, index inputs,
parameters, kwargs and the output's dims, with what the calls cannot settle said as notes."""

from __future__ import annotations

import numpy as np
import pytest

from gpuemu_ci.errors import UsageError
from gpuemu_ci.onboard.facts import CallFacts, args_facts, outputs_facts
from gpuemu_ci.onboard.infer import infer


def call(result: object = None, **args: object) -> CallFacts:
    return CallFacts(args_facts(args), outputs_facts(result) if result is not None else ())


def norm_calls() -> list[CallFacts]:
    calls = []
    for b, t, d, dtype in [(2, 16, 64, np.float32), (1, 7, 96, np.float16), (4, 3, 128, np.float32)]:
        x = np.zeros((b, t, d), dtype)
        calls.append(call(x, x=x, weight=np.ones(d, dtype), eps=1e-6))
    return calls


def test_axes_of_equal_size_in_every_call_share_a_dim_and_a_parameter_stays_contiguous():
    draft = infer("rms_norm", "acme.ops:rms_norm", norm_calls())
    assert [d.name for d in draft.dims] == ["B", "T", "D"]
    assert [d.sizes for d in draft.dims] == [(1, 2, 4), (3, 7, 16), (64, 96, 128)]
    x, weight = draft.inputs
    assert x.dims == ("B", "T", "D") and not x.contiguous_only
    assert weight.dims == ("D",) and weight.contiguous_only
    assert draft.dtypes == ("float32", "float16") and draft.framework == "numpy"
    assert draft.kwargs == {"eps": (1e-6,)} and draft.output is None


def test_a_dim_that_is_the_product_of_two_others_is_derived():
    calls = []
    for kvh, g, t in [(2, 4, 16), (1, 8, 9), (4, 4, 33)]:
        q = np.zeros((1, kvh * g, t, 64), np.float32)
        k = np.zeros((1, kvh, t, 64), np.float32)
        groups = np.zeros((g,), np.float32)  # something of size G, so the calls show G
        calls.append(call(q, q=q, k=k, groups=groups))
    draft = infer("gqa", "m:gqa", calls)
    by_name = {d.name: d for d in draft.dims}
    h = next(d for d in draft.dims if d.expr)
    assert h.name == "H" and h.expr is not None and set(h.expr.split(" * ")) == {"K", "V"}, draft.dims
    assert by_name["D"].sizes == (64,)


def test_an_integer_input_is_an_index_bounded_by_the_dim_above_every_value():
    calls = []
    for n, vocab in [(8, 100), (5, 37)]:
        logits = np.zeros((n, vocab), np.float32)
        target = np.array([vocab - 1, *range(n - 2), -100], np.int64)  # -100: ignored positions
        calls.append(call(np.zeros((), np.float32), logits=logits, target=target))
    draft = infer("xent", "m:xent", calls)
    index = draft.inputs[1]
    assert (index.kind, index.dtype, index.low, index.high, index.ignore_value) == (
        "index",
        "int64",
        0,
        "N",
        -100,
    )
    assert draft.output == () or draft.output is None


def test_an_integer_argument_equal_to_a_dim_is_bound_to_it():
    calls = [
        call(np.zeros((m, n), np.float32), x=np.zeros((m, n), np.float32), n_cols=n)
        for m, n in [(4, 9), (2, 30)]
    ]
    draft = infer("f", "m:f", calls)
    assert draft.kwargs == {"n_cols": ("N",)}


def test_the_output_dims_are_named_when_they_are_not_the_inputs():
    calls = [
        call(np.zeros((m,), np.float32), x=np.zeros((m, n), np.float32)) for m, n in [(4, 9), (2, 30), (7, 7)]
    ]
    assert infer("rowsum", "m:rowsum", calls).output == ("M",)


def test_one_kind_of_call_says_equal_sizes_were_merged():
    draft = infer("f", "m:f", [call(None, a=np.zeros((8, 8), np.float32))])
    assert [d.name for d in draft.dims] == ["M"]
    assert any("one kind of call" in note for note in draft.notes)


def test_calls_of_another_rank_are_left_out_and_said_so():
    calls = [
        call(None, x=np.zeros((4, 8), np.float32)),
        call(None, x=np.zeros((2, 4, 8), np.float32)),
        call(None, x=np.zeros((3, 5, 16), np.float32)),
    ]
    draft = infer("f", "m:f", calls)
    assert draft.inputs[0].dims == ("B", "T", "D") and draft.calls == 2
    assert any("1 of 3 kinds of call had inputs of other ranks" in note for note in draft.notes)


def test_no_calls_is_refused():
    with pytest.raises(UsageError, match="no call of m:f was recorded"):
        infer("f", "m:f", [])


def test_a_strided_input_in_real_calls_keeps_every_layout():
    x = np.zeros((8, 16), np.float32)[:, ::2]
    draft = infer("f", "m:f", [call(None, x=x, w=np.ones(8, np.float32))])
    assert any("`x` was strided in real calls" in note for note in draft.notes)
