"""Properties of the CUDA tokenizer and operators over generated sources: whatever a `.cu` file holds, reading it
never raises, and every mutant is the file with one span replaced (every byte before and after it kept)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from gpuemu_ci.config.model import KernelSpec
from gpuemu_ci.mutate.cuda import cuda_mutants
from gpuemu_ci.mutate.cuda_operators import OPERATORS
from gpuemu_ci.mutate.cuda_source import tokenize

FRAGMENTS = (
    "__global__ void k(const float* x, float* out, int n) {", "__device__ float f(float v) {", "}", "{",
    "for (int i = 0; i < n; i += 1)", "while (i <= n)", "if (x[i] > 0)", "acc += x[i];", "float acc = 0.0f;",
    "__syncthreads();", "atomicAdd(&out[i], v);", "out[i] = acc;", "static_cast<int>(v)", "a << 2 >> 1",
    "/* a < b */", "// i < n\n", '"i < n"', "'<'", "#define N 4\n", "#if 1\n", "\\\n", "(", ")", "[", "]", ";",
    ",", "<", ">", "=", "é", "\n", " ", "1'000", "0x1Fu", "1e-3f",
)  # fmt: skip
SPEC = KernelSpec(name="k", source=Path("k.cu"), archs=())


def _offset(text: str, line: int, col: int) -> int:
    """The byte offset of (1-based line, byte column) in `text`."""
    return sum(len(part.encode()) for part in text.splitlines(keepends=True)[: line - 1]) + col


@given(st.lists(st.sampled_from(FRAGMENTS), max_size=60).map(" ".join) | st.text(max_size=200))
@example(" ".join(FRAGMENTS[:10]) + " } }")
def test_any_source_reads_and_every_mutant_replaces_one_span(text: str) -> None:
    tokens = tokenize(text)
    assert [t.index for t in tokens] == list(range(len(tokens)))
    encoded = text.encode()
    for mutant in cuda_mutants(SPEC, text, "k.cu", OPERATORS):
        span = mutant.change.span
        start, end = _offset(text, span.line, span.col), _offset(text, span.end_line, span.end_col)
        assert mutant.text.encode() == encoded[:start] + mutant.change.new.encode() + encoded[end:]
        assert mutant.text != text


def test_the_example_source_has_mutants() -> None:
    assert len(cuda_mutants(SPEC, " ".join(FRAGMENTS[:10]) + " } }", "k.cu", OPERATORS)) >= 5
