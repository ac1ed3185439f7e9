"""The float64 shadow run through the real gate: `gpuemu-ci run` on a project whose Triton norm kernels fail, the
explain re-run of each failure running beside the shadow (backends/op_side.py), its "where" naming the line
where the kernel first parted from float64, and nothing for a bug that is the same wrong code in float64."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.support_tiers import runs_a_gate
from tests.triton_cpu.support_interpreter import gpuemu, replayed_where

pytest.importorskip("torch")
pytest.importorskip("triton")

KERNELS = textwrap.dedent("""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _norm(x_ptr, y_ptr, N, BLOCK: tl.constexpr, ONE_PASS: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0)
        mean = tl.sum(x, axis=0) / N
        if ONE_PASS:
            var = tl.sum(x * x, axis=0) / N - mean * mean  # ONE PASS
        else:
            d = tl.where(mask, x - mean, 0.0)
            var = tl.sum(d * d, axis=0) / N
        rstd = 1.0 / tl.sqrt(var + 1e-5)
        tl.store(y_ptr + row * N + cols, (x - mean) * rstd, mask=mask)

    @triton.jit
    def _shift(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_ptr + row * N + (cols + 1) % N, mask=mask, other=0.0)  # the bug: a neighbour's element
        tl.store(y_ptr + row * N + cols, x * 2.0, mask=mask)

    def _launch(kernel, x, **constexprs):
        x = x.contiguous()
        y = torch.empty_like(x)
        kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]), **constexprs)
        return y

    def norm_one_pass(x):
        return _launch(_norm, x, ONE_PASS=True)

    def norm_two_pass(x):
        return _launch(_norm, x, ONE_PASS=False)

    def shift(x):
        return _launch(_shift, x)

    def ref_norm(x):
        centred = x - x.mean(axis=-1, keepdims=True)
        return centred / ((centred**2).mean(axis=-1, keepdims=True) + 1e-5) ** 0.5

    def ref_double(x):
        return 2.0 * x
""")

OP = """
[[ops]]
name = "{name}"
op = "kernels:{name}"
reference = "kernels:{ref}"
framework = "torch"
family = "{family}"
dtypes = ["float32"]
[ops.dims]
M = {{ min = 1, max = 16, typical = [8] }}
N = {{ min = 2, max = 1024, typical = [256] }}
[ops.inputs]
x = ["M", "N"]
"""


@pytest.mark.slow
@runs_a_gate
def test_a_one_pass_variance_is_named_at_its_subtraction_and_a_logic_bug_at_no_float64_line(
    tmp_path: Path,
) -> None:
    (tmp_path / "kernels.py").write_text(KERNELS)
    ops = [
        ("norm_one_pass", "ref_norm", "norm"),
        ("norm_two_pass", "ref_norm", "norm"),
        ("shift", "ref_double", "elementwise"),
    ]
    config = tmp_path / "gpuemu.toml"
    config.write_text(
        '[project]\nname = "t"\n[ci]\nquick_iterations = 6\n'
        + "".join(OP.format(name=name, ref=ref, family=family) for name, ref, family in ops)
    )
    gpuemu("run", "--config", str(config), "--seed", "3", "--out", "out", "--jobs", "2", cwd=tmp_path)
    document = json.loads((tmp_path / "out" / "results.json").read_text())
    by_name = {op["name"]: op for op in document["ops"]}
    line = next(i for i, text in enumerate(KERNELS.splitlines(), 1) if "# ONE PASS" in text)
    one_pass = by_name["norm_one_pass"]
    assert one_pass["status"] == "failed" and one_pass["failures"]
    for failure in one_pass["failures"]:
        # The store's line first, then the line where the worst element's program parted from float64.
        assert (
            f"first parted from float64 at kernels.py:{line} (in _norm) `var = tl.sum(x * x, axis=0)"
            in (failure["where"])
        ), failure["where"]
        program = failure["where"].split("stored by program ", 1)[1].split(" of ", 1)[0]
        assert (
            ": ×" in failure["where"] and f"at program {program} (kernel " in failure["where"]
        )  # the same one
    # The two-pass kernel on the same cases passes; reading a neighbour's element fails, the same in float64.
    assert by_name["norm_two_pass"]["status"] == "passed"
    shift = by_name["shift"]
    assert shift["status"] == "failed" and shift["failures"]
    for failure in shift["failures"]:
        assert failure["where"].startswith("stored by program") and "float64" not in failure["where"]


@pytest.mark.slow
@runs_a_gate
def test_on_a_large_grid_the_gate_shadows_the_worst_elements_program_and_says_what_a_full_shadow_says(
    tmp_path: Path,
) -> None:
    """The gate's explain re-run follows the program that stored the worst element, and those of the largest errors
    only until one has a finding (backends/explain_shadow.py); `replay --explain` follows every program. Both name
    the same line at the same program, and the re-runs' seconds are in the op's time split."""
    (tmp_path / "kernels.py").write_text(KERNELS)
    config = tmp_path / "gpuemu.toml"
    op = OP.format(name="norm_one_pass", ref="ref_norm", family="norm")
    op = op.replace("M = {{ min = 1, max = 16, typical = [8] }}".replace("{{", "{").replace("}}", "}"),
                    "M = { min = 65, max = 160, typical = [100] }")  # fmt: skip
    assert "min = 65" in op
    config.write_text('[project]\nname = "t"\n[ci]\nquick_iterations = 6\n' + op)
    gpuemu("run", "--config", str(config), "--seed", "3", "--out", "out", "--jobs", "2", cwd=tmp_path)
    document = json.loads((tmp_path / "out" / "results.json").read_text())
    (found,) = document["ops"]
    assert found["status"] == "failed" and found["failures"]
    assert found["timings"]["explain_s"] > 0.0  # the explain re-runs are timed, apart from the cases
    line = next(i for i, text in enumerate(KERNELS.splitlines(), 1) if "# ONE PASS" in text)
    failure = found["failures"][0]
    grid = int(failure["where"].split("(grid (", 1)[1].split(",", 1)[0])
    assert grid >= 65  # a launch of many programs, of which the shadow followed one
    assert f"first parted from float64 at kernels.py:{line} (in _norm)" in failure["where"]
    assert replayed_where(config, "norm_one_pass", failure["case_seed"], tmp_path) == failure["where"]
