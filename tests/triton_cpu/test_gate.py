"""The GPU-faithful Triton layer through the real gate: `gpuemu-ci run` on a project with Triton kernels (its
worker processes run them in Triton's interpreter), then `gpuemu-ci replay` of a failure from its seed."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.support_tiers import runs_a_gate
from tests.triton_cpu.support_interpreter import gpuemu

pytest.importorskip("torch")
pytest.importorskip("triton")


KERNELS = textwrap.dedent("""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr, MASK_STORE: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        if MASK_STORE:
            tl.store(y_ptr + offs, x * 2.0, mask=offs < n)
        else:
            tl.store(y_ptr + offs, x * 2.0)

    @triton.jit
    def _split_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        part = tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0)
        tl.store(out_ptr, tl.load(out_ptr) + part)

    def _launch(x, mask_store):
        y = torch.empty_like(x)
        _scale[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64, MASK_STORE=mask_store)
        return y

    def scale(x):
        return _launch(x.contiguous(), True)

    @triton.jit
    def _scale_tail(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        factor = tl.where(tl.sum(mask.to(tl.int32), axis=0) == BLOCK, 2.0, 2.5)  # the bug: the partial tile's
        tl.store(y_ptr + offs, x * factor, mask=mask)  # TAIL STORE

    def scale_tail(x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _scale_tail[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64)
        return y

    def scale_unmasked(x):
        return _launch(x.contiguous(), False)

    def total(x):
        x = x.contiguous()
        out = torch.zeros(1, dtype=torch.float32)
        _split_sum[(triton.cdiv(x.numel(), 16),)](x, out, x.numel(), BLOCK=16)
        return out

    @triton.jit
    def _asm(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
        tl.store(y_ptr + offs, y, mask=offs < n)

    def asm(x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _asm[(1,)](x, y, x.numel(), BLOCK=512)
        return y

    def ref_same(x):
        return x

    def ref_scale(x):
        return 2.0 * x

    def ref_total(x):
        return x.sum(keepdims=True)
""")

OP = """
[[ops]]
name = "{name}"
op = "kernels:{op}"
reference = "kernels:{ref}"
framework = "torch"
family = "{family}"
dtypes = ["float32"]
{extra}
[ops.dims]
N = {{ min = 1, max = 300, typical = [100] }}
[ops.inputs]
x = ["N"]
"""


def _project(tmp_path: Path) -> Path:
    (tmp_path / "kernels.py").write_text(KERNELS)
    ops = [
        OP.format(name="scale", op="scale", ref="ref_scale", family="elementwise", extra=""),
        OP.format(
            name="scale_unmasked", op="scale_unmasked", ref="ref_scale", family="elementwise", extra=""
        ),
        OP.format(name="asm", op="asm", ref="ref_same", family="elementwise", extra=""),
        OP.format(name="scale_tail", op="scale_tail", ref="ref_scale", family="elementwise", extra=""),
        OP.format(
            name="scale_unmasked_bf16", op="scale_unmasked", ref="ref_scale", family="elementwise", extra=""
        ).replace('dtypes = ["float32"]', 'dtypes = ["bfloat16"]'),
        OP.format(name="total", op="total", ref="ref_total", family="reduction", extra="output = [1]"),
        OP.format(
            name="total_unchecked", op="total", ref="ref_total", family="reduction", extra="output = [1]"
        ).replace("[ops.dims]", "[ops.triton]\nsanitize = false\n[ops.dims]"),
    ]
    config = tmp_path / "gpuemu.toml"
    config.write_text('[project]\nname = "t"\n[ci]\nquick_iterations = 6\n' + "".join(ops))
    return config


@pytest.fixture(scope="module")
@runs_a_gate
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, subprocess.CompletedProcess[str]]:
    tmp_path = tmp_path_factory.mktemp("gate")
    config = _project(tmp_path)
    done = gpuemu("run", "--config", str(config), "--seed", "3", "--out", "out", "--jobs", "2", cwd=tmp_path)
    return tmp_path, json.loads((tmp_path / "out" / "results.json").read_text()), done


@pytest.mark.slow
def test_a_wrong_partial_tile_is_explained_by_pattern_where_and_map(run: tuple) -> None:
    tmp_path, document, _ = run
    op = next(o for o in document["ops"] if o["name"] == "scale_tail")
    assert op["status"] == "failed"
    line = next(i for i, text in enumerate(KERNELS.splitlines(), 1) if "TAIL STORE" in text)
    for failure in op["failures"]:
        n = failure["shapes"]["x"][0]
        start = n - n % 64
        assert failure["pattern"].startswith(
            f"wrong only in the last partial tile of N={n} (cols {start}–{n - 1}, tile 64)"
            if n > 64
            else "everywhere"
        ), failure["pattern"]
        assert failure["where"].startswith(f"stored by program ({n // 64}, 0, 0) of `_scale_tail`")
        assert f"at kernels.py:{line} (in _scale_tail); its store's mask was partial" in failure["where"]
        assert (tmp_path / "out" / failure["error_map"]).read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
def test_a_store_past_the_end_fails_the_gate_as_out_of_bounds_with_where(run: tuple) -> None:
    _, results, done = run
    assert done.returncode == 1, done.stderr[-2000:]
    ops = {op["name"]: op for op in results["ops"]}
    assert ops["scale"]["status"] == "passed"
    failures = ops["scale_unmasked"]["failures"]
    assert failures and {f["kind"] for f in failures} == {"out_of_bounds"}
    message = failures[0]["message"]
    assert "store out of bounds in kernel `_scale`, program (" in message and "kernels.py:" in message
    assert "of `y_ptr` (shape [" in message and "past its end" in message
    assert "raised" not in message  # the kernel's stop is the finding, not an exception of the op


def test_bfloat16_cases_are_judged_and_a_store_past_the_end_fails_as_in_float32(run: tuple) -> None:
    """bfloat16 values are real numbers under the layer (triton_cpu/lowp.py): the cases are judged, and the
    unmasked store fails as out of bounds wherever the last program does not fit."""
    _, results, _ = run
    op = next(op for op in results["ops"] if op["name"] == "scale_unmasked_bf16")
    assert op["status"] == "failed" and {f["kind"] for f in op["failures"]} == {"out_of_bounds"}
    assert op["cases_skipped"] == 0 and op["cases_passed"] + op["cases_failed"] == op["cases_total"]


def test_split_sums_without_atomics_fail_as_a_race_unless_sanitize_is_off(run: tuple) -> None:
    _, results, _ = run
    ops = {op["name"]: op for op in results["ops"]}
    assert {f["kind"] for f in ops["total"]["failures"]} == {"race"}
    assert "element offset 0 of `out_ptr`" in ops["total"]["failures"][0]["message"]
    assert ops["total_unchecked"]["status"] == "passed"  # the interpreter runs the programs one at a time
    assert ops["total_unchecked"].get("triton_launches", {}) == {}  # sanitize = false: the plain interpreter


def test_the_results_count_launches_run_vectorised_and_one_program_at_a_time_with_why(run: tuple) -> None:
    _, results, _ = run
    ops = {op["name"]: op for op in results["ops"]}
    assert (
        set(ops["scale"]["triton_launches"]) == {"vectorised"}
        and ops["scale"]["triton_launches"]["vectorised"] > 0
    )
    why = "one program at a time: programs write what other programs of the launch read or wrote"
    assert ops["total"]["triton_launches"].get(why, 0) > 0
    assert (
        ops["scale_unmasked"]["triton_launches"].get("one program at a time: an access out of bounds", 0) > 0
    )


def test_inline_assembly_the_interpreter_cannot_run_is_not_judged_and_names_kernel_and_line(
    run: tuple,
) -> None:
    """Not judged is never passed: each case is an error of the op (a GPU runs it), naming what the
    interpreter could not run, in which kernel and at which line."""
    _, results, _ = run
    op = next(op for op in results["ops"] if op["name"] == "asm")
    assert op["status"] == "error" and op["cases_failed"] == 0 and op["cases_passed"] == 0
    message = op["failures"][0]["message"]
    assert "not judged on this machine: Triton's interpreter cannot run `inline_asm_elementwise`" in message
    assert "in `_asm` at kernels.py:" in message and "a GPU runs it" in message


@pytest.mark.slow
def test_an_out_of_bounds_failure_replays_from_its_seed(run: tuple) -> None:
    tmp_path, results, _ = run
    failure = next(op for op in results["ops"] if op["name"] == "scale_unmasked")["failures"][0]
    seed = str(failure["case_seed"])
    done = gpuemu("replay", "--op", "scale_unmasked", "--seed", seed, "--out", "replayed", cwd=tmp_path)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "out_of_bounds" in done.stdout + done.stderr
    assert "store out of bounds in kernel `_scale`" in done.stdout + done.stderr
