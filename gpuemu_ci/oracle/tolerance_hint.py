"""What a mismatch judged with gpuemu.toml's atol/rtol adds for a user coming from upstream gpuemu: fixed
tolerances measured on upstream's inputs (uniform in [-10, 10), a few shapes) flag correct kernels on the wider
inputs gpuemu-ci draws (a correct float32 matmul at atol = rtol = 1e-5 from K of a few hundred), and the op's
`family` is the fix: the error bound grows with what each output sums and with the inputs' magnitudes."""

from __future__ import annotations

from gpuemu_ci.config.model import Family, OpSpec

# Words in an op's name that say its family (upstream's op names: matmul, softmax, layernorm, flash_attention).
_NAMED = (
    ("attention", Family.ATTENTION),
    ("attn", Family.ATTENTION),
    ("matmul", Family.MATMUL),
    ("gemm", Family.MATMUL),
    ("linear", Family.MATMUL),
    ("softmax", Family.SOFTMAX),
    ("norm", Family.NORM),
    ("cumsum", Family.SCAN),
    ("scan", Family.SCAN),
    ("sum", Family.REDUCTION),
    ("mean", Family.REDUCTION),
    ("gelu", Family.ELEMENTWISE),
    ("relu", Family.ELEMENTWISE),
    ("silu", Family.ELEMENTWISE),
)


def advice(op: OpSpec) -> str:
    """Which family to declare (from the op's name where it says one), and what to drop."""
    name = op.name.lower()
    family = next((f.value for word, f in _NAMED if word in name), None)
    which = f'family = "{family}"' if family else "its `family` (elementwise, reduction, matmul, ...)"
    return (
        f"to judge it by the error model declare {which} ([validation.tolerances] then no longer apply to it; "
        "[ops.tolerances], if kept, still override the bound)"
    )


def note(op: OpSpec) -> str:
    """The hint, for an op judged by allclose (no `family`); empty for an op that has one."""
    if op.error_model.family is not None:
        return ""
    return (
        ". Judged by allclose with gpuemu.toml's atol/rtol, which do not grow with the length of the sums an "
        "output adds up or with the inputs' magnitudes (gpuemu-ci draws wider inputs than upstream's uniform "
        f"[-10, 10)); {advice(op)} (docs/migrating.md, Tolerances)"
    )
