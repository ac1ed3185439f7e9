"""The CUDA mutation operators: the change each makes in tests/mutate/cuda_project's kernels (read as tokens: no
compiler runs), and, through the real CLI with the real nvcc, what the lint alone makes of the mutants where no
GPU runs their cases: killed where an artifact check the original keeps breaks, `equivalent?` where the PTX is
the original's, and `not run` (never survived, never killed) for the rest."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from gpuemu_ci.backends.cuda import KernelProgram
from gpuemu_ci.backends.gpu import detect_gpu
from gpuemu_ci.config.load import load_config
from gpuemu_ci.mutate.cuda import cuda_mutants
from gpuemu_ci.mutate.cuda_operators import OPERATORS
from gpuemu_ci.mutate.cuda_source import device_functions, tokenize
from gpuemu_ci.mutate.source import SourceFile
from gpuemu_ci.pipeline.session import Session
from gpuemu_ci.pipeline.settings import RunOptions
from tests.support_cli import run_cli

PROJECT = Path(__file__).parent / "cuda_project"
SOURCE = PROJECT / "kernels" / "reduce.cu"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cuda" / "gpuemu.toml"
requires_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")

# operator -> (the [[kernels]] entry, a line it changes, that line changed)
WHERE_IT_MATTERS = {
    "bound_flipped": (
        "histogram",
        "if (i < n && x[i] >= 0 && x[i] < bins) atomicAdd(&counts[x[i]], 1u);",
        "if (i < n && x[i] > 0 && x[i] < bins) atomicAdd(&counts[x[i]], 1u);",
    ),
    "bound_shifted": (
        "block_sum",
        "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {",
        "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n - 1; i += gridDim.x * blockDim.x) {",
    ),
    "accumulator_reset": ("block_sum", "acc += x[i];", "acc = x[i];"),
    "offset_shifted": (
        "histogram",
        "if (i < n && x[i] >= 0 && x[i] < bins) atomicAdd(&counts[x[i]], 1u);",
        "if (i < n && x[i] >= 0 && x[i] < bins) atomicAdd(&counts[x[i] + 1], 1u);",
    ),
    "accumulator_narrowed": (
        "block_sum",
        "acc += x[i];",
        '{ acc += x[i]; asm("{.reg .b16 h; cvt.rn.f16.f32 h, %0; cvt.f32.f16 %0, h;}" : "+f"(acc)); }',
    ),
    "barrier_removed": ("block_sum", "__syncthreads();", "/* removed: __syncthreads() */;"),
    "atomic_to_store": (
        "histogram",
        "if (i < n && x[i] >= 0 && x[i] < bins) atomicAdd(&counts[x[i]], 1u);",
        "if (i < n && x[i] >= 0 && x[i] < bins) counts[x[i]] = 1u;",
    ),
}


def _mutants(kernel: str) -> list[Any]:
    config = load_config(PROJECT / "gpuemu.toml")
    (spec,) = [k for k in config.kernels if k.name == kernel]
    return cuda_mutants(spec, SOURCE.read_text(), "kernels/reduce.cu", OPERATORS)


def test_every_cuda_operator_has_a_kernel_where_it_matters() -> None:
    assert set(WHERE_IT_MATTERS) == {op.name for op in OPERATORS}


@pytest.mark.parametrize("operator", [op.name for op in OPERATORS])
def test_the_change_each_cuda_operator_makes(operator: str) -> None:
    kernel, before, after = WHERE_IT_MATTERS[operator]
    mutants = [m for m in _mutants(kernel) if m.operator == operator]
    assert (before, after) in [(m.before, m.after) for m in mutants]
    for mutant in mutants:  # the whole file, changed in one place, every other line kept
        original, changed = SOURCE.read_text().splitlines(), mutant.text.splitlines()
        assert len(changed) == len(original)
        assert [i for i, (a, b) in enumerate(zip(original, changed, strict=True)) if a != b] == [
            mutant.line - 1
        ]


def test_an_entry_gets_the_mutants_of_its_own_kernel_and_what_it_calls() -> None:
    assert {m.kernel for m in _mutants("block_sum")} == {"block_sum", "warp_sum"}
    assert {m.kernel for m in _mutants("histogram")} == {"histogram"}  # warp_sum is not called there


TRICKY = r"""
#include <cuda_fp16.h>
#define LIMIT(a) ((a) < 4 ? (a) : 4)
// if (i < n) a comment is not code
template <typename T> __device__ T twice(T v) { return v + v; }
__global__ void k(const float* __restrict__ x, float* out, int n, unsigned s) {
    const char* label = "i < n";
    float4 v = reinterpret_cast<const float4*>(x)[0];
    int shifted = static_cast<int>(s << 2) >> 1;
    out[0] = twice<float>(v.x) + (shifted < n ? 1.0f : 0.0f);
    for (unsigned i = 0; i < s; i += 2) out[i] += x[i >> 1];
}
"""


def test_the_tokenizer_reads_comparisons_not_templates_shifts_comments_strings_or_macros() -> None:
    source = SourceFile(TRICKY)
    (function,) = [f for f in device_functions(tokenize(TRICKY)) if f.name == "k"]
    assert [p.name for p in function.parameters] == ["x", "out", "n", "s"]
    assert function.pointers == {"x", "out"}
    (flipped,) = [op for op in OPERATORS if op.name == "bound_flipped"]
    changes = [source.diff_lines(c)[1] for c in flipped.changes(function, source)]
    assert changes == [
        "out[0] = twice<float>(v.x) + (shifted <= n ? 1.0f : 0.0f);",
        "for (unsigned i = 0; i <= s; i += 2) out[i] += x[i >> 1];",
    ]
    (shifted,) = [op for op in OPERATORS if op.name == "offset_shifted"]
    indices = [source.diff_lines(c)[1] for c in shifted.changes(function, source)]
    assert "for (unsigned i = 0; i < s; i += 2) out[i] += x[(i >> 1) + 1];" in indices  # `>>` binds looser
    (reset,) = [op for op in OPERATORS if op.name == "accumulator_reset"]
    resets = [source.diff_lines(c)[1] for c in reset.changes(function, source)]
    assert resets == ["for (unsigned i = 0; i < s; i += 2) out[i] = x[i >> 1];"]  # never the loop's step


def test_a_mutant_runs_through_the_kernels_own_launch_with_its_text_compiled_in_memory() -> None:
    config = load_config(EXAMPLE)
    (kernel,) = config.kernels
    assert kernel.op is not None
    task = Session(config, RunOptions(), gpu=None).task(kernel.op)
    mutant = cuda_mutants(kernel, kernel.source.read_text(), "kernels/gelu.cu", OPERATORS)[0]
    changed = KernelProgram.decode(mutant.task(task).op_target.spec)
    original = KernelProgram.decode(task.op_target.spec)
    assert original.code is None and changed.code == mutant.text != kernel.source.read_text()
    assert (changed.source, changed.entry, changed.grid, changed.args) == (
        original.source,
        original.entry,
        original.grid,
        original.args,
    )


@pytest.fixture(scope="module")
def mutated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`gpuemu-ci mutate` on the CUDA project, every operator, every mutant (once for the module)."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    out = tmp_path_factory.mktemp("mutate-cuda")
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()
    result = run_cli(["mutate", "--config", PROJECT / "gpuemu.toml", "--out", out, "--no-cache"])
    assert hashlib.sha256(SOURCE.read_bytes()).hexdigest() == digest  # the user's file is never written
    assert result.code == 0, result.stderr
    document: dict[str, Any] = json.loads((out / "results.json").read_text())
    document["stderr"] = result.stderr
    return document


def _mutant(document: dict[str, Any], kernel: str, operator: str, after: str) -> dict[str, Any]:
    (op,) = [op for op in document["mutation"]["ops"] if op["op"] == kernel]
    (mutant,) = [m for m in op["mutants"] if m["operator"] == operator and m["after"] == after]
    found: dict[str, Any] = mutant
    return found


@pytest.mark.slow
def test_the_lint_kills_what_breaks_an_artifact_check_and_nothing_else(mutated: dict[str, Any]) -> None:
    barrier = _mutant(mutated, "block_sum", "barrier_removed", "/* removed: __syncthreads() */;")
    assert barrier["status"] == "killed" and barrier["killed_by"] == "lint:required_ptx_pattern"
    assert "bar\\\\.sync" in barrier["message"] and barrier["case"] is None
    _, _, after = WHERE_IT_MATTERS["atomic_to_store"]
    atomic = _mutant(mutated, "histogram", "atomic_to_store", after)
    assert atomic["status"] == "killed" and atomic["killed_by"] == "lint:required_ptx_pattern"
    # block_sum's config requires no atomic: the lint passes the same change there, and says what would not.
    unchecked = _mutant(mutated, "block_sum", "atomic_to_store", "if (lane == 0) *(out) = total;")
    assert unchecked["status"] == "not run" and "required_patterns" in unchecked["hint"]


@pytest.mark.slow
def test_a_mutant_compiled_to_the_originals_ptx_is_equivalent(mutated: dict[str, Any]) -> None:
    guard = _mutant(mutated, "block_sum", "bound_flipped", "if (lane <= WARP) acc = warp_sum(acc);")
    assert guard["status"] == "equivalent?" and "PTX" in guard["message"]


@pytest.mark.slow
def test_without_cases_a_cuda_mutant_is_not_run_never_survived_and_the_kernel_has_no_score(
    mutated: dict[str, Any],
) -> None:
    ops = mutated["mutation"]["ops"]
    assert {op["op"] for op in ops} == {"block_sum", "histogram"}
    mutants = [m for op in ops for m in op["mutants"]]
    assert {m["status"] for m in mutants} == {"killed", "equivalent?", "not run"}  # every mutant compiles
    for op in ops:
        assert op["language"] == "cuda" and op["scored"] and op["score"] is None and op["survived"] == 0
        assert op["lint_only_because"] == "it has no [kernels.launch] table, so no case runs it"
        assert op["mutants_planned"] == len(op["mutants"]) > 0
    for mutant in mutants:
        if mutant["status"] == "not run":
            assert mutant["message"].startswith("it has no [kernels.launch] table")
            assert "the lint passed it" in mutant["message"]
    assert "lint only, no score" in mutated["stderr"] and "mutation score" not in mutated["stderr"]
    assert mutated["kernels"] and all(k["status"] == "passed" for k in mutated["kernels"])


@requires_nvcc
@pytest.mark.slow
def test_a_lint_only_kernel_fails_min_score_and_lint_verdicts_come_back_from_the_cache(
    tmp_path: Path,
) -> None:
    args: list[str | Path] = [
        "mutate",
        "--config",
        PROJECT / "gpuemu.toml",
        "--op",
        "histogram",
        "--operator",
        "atomic_to_store",
    ]
    cache = tmp_path / "cache"
    first = run_cli([*args, "--out", tmp_path / "a", "--cache", cache])
    assert first.code == 0, first.stderr
    strict = run_cli([*args, "--out", tmp_path / "b", "--cache", cache, "--min-score", "50"])
    assert strict.code == 1, strict.stderr
    document = json.loads((tmp_path / "b" / "results.json").read_text())
    assert any("histogram (lint only: no score here)" in note for note in document["notes"])
    (mutant,) = document["mutation"]["ops"][0]["mutants"]
    assert mutant["status"] == "killed" and mutant["cached"]


@requires_nvcc
@pytest.mark.slow
def test_the_cuda_example_without_a_gpu_is_linted_and_its_mutants_left_to_a_gpu(tmp_path: Path) -> None:
    if detect_gpu() is not None:
        pytest.skip("a GPU is here: the example's mutants run (tests marked gpu)")
    result = run_cli(["mutate", "--config", EXAMPLE, "--out", tmp_path, "--no-cache"])
    assert result.code == 0, result.stderr
    (op,) = json.loads((tmp_path / "results.json").read_text())["mutation"]["ops"]
    assert op["lint_only_because"] == "its cases need a GPU and there is none here"
    assert op["not_run"] + op["equivalent"] == len(op["mutants"]) > 0 and op["survived"] == op["killed"] == 0


@pytest.mark.gpu
def test_on_a_gpu_the_cuda_examples_mutants_run_through_its_launch(tmp_path: Path) -> None:
    if detect_gpu() is None:
        pytest.skip("no GPU on this machine")
    pytest.importorskip("cupy")
    result = run_cli(["mutate", "--config", EXAMPLE, "--out", tmp_path, "--no-cache"])
    assert result.code == 0, result.stderr
    (op,) = json.loads((tmp_path / "results.json").read_text())["mutation"]["ops"]
    assert op["lint_only_because"] is None and op["score"] is not None
    assert op["not_run"] == 0 and op["killed"] > 0
