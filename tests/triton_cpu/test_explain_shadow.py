"""Which programs an explain re-run's float64 shadow follows (backends/explain_shadow.py), on the op side of a real
Triton kernel under the interpreter: those that stored the failure's worst element and its largest errors; every
program where nothing says which (`replay --explain`) or the failing output is a gradient; none where torch, not a
watched store, wrote every element the judge would read a finding for."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from gpuemu_ci.backends.explain_shadow import MAX_FOLLOWED
from tests.support_tiers import runs_a_gate
from tests.triton_cpu.support_interpreter import gpuemu, replayed_where, run_interpreted

pytest.importorskip("torch")
pytest.importorskip("triton")

KERNELS = textwrap.dedent("""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _double(x_ptr, y_ptr, N, HALF, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < HALF
        x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0)
        tl.store(y_ptr + row * N + cols, x * 2.0, mask=mask)

    def half_in_torch(x):
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, n = x.shape
        half = n // 2
        _double[(rows,)](x, y, n, half, BLOCK=triton.next_power_of_2(max(half, 1)))
        y[:, half:] = x[:, half:] * 2.5  # the bug, in torch: no watched store wrote these
        return y

    def ref_double(x):
        return 2.0 * x
""")

SCRIPT = textwrap.dedent("""
    import json
    from pathlib import Path
    from gpuemu_ci.backends.interface import CaseSpec, ExplainFocus
    from gpuemu_ci.backends.op_side import run_op_side
    from gpuemu_ci.fuzz.case import build_case
    from tests.backends.support_cases import first_case, op_task

    root = Path(__file__).parent
    (root / "halves.py").write_text(KERNELS)
    schema = '[ops.dims]\\nM = { min = 12, max = 12 }\\nN = { min = 40, max = 40 }\\n[ops.inputs]\\nx = ["M", "N"]\\n'
    task = op_task(root, "halves:half_in_torch", "halves:ref_double", schema=schema,
                   extra='family = "elementwise"\\nframework = "torch"')
    case = first_case(task)
    rows, n = build_case(task.op, case.seed, task.root).arrays["x"].shape
    in_torch = tuple(r * n + c for r in range(rows) for c in range(n // 2, n))
    in_kernel = tuple(r * n + c for r in range(rows) for c in range(n // 2))
    focuses = {
        "torch wrote them": ExplainFocus((3, n - 1), in_torch, (rows, n)),
        "a kernel wrote the worst": ExplainFocus((3, 0), in_kernel, (rows, n)),
        "a gradient": ExplainFocus((3, n - 1), in_torch, (rows, n), gradient=True),
        "replay --explain": None,
    }
    seen = {"rows": rows}
    for name, focus in focuses.items():
        side = run_op_side(task, CaseSpec(case.seed, case.index, explain=True, explain_focus=focus))
        seen[name] = {"shadowed": side.triton.shadowed, "mapped": [s is not None for s in side.triton.stores]}
    print(json.dumps(seen))
""")


@pytest.mark.slow  # a fresh interpreter with Triton (about 10 s)
def test_the_shadow_follows_the_programs_the_judge_reads_and_none_where_torch_wrote_the_failing_elements(
    tmp_path: Path,
) -> None:
    seen = run_interpreted(f"KERNELS = {KERNELS!r}\n" + SCRIPT, tmp_path)
    rows = seen["rows"]
    assert rows == 12
    for name in seen.keys() - {"rows"}:
        assert seen[name]["mapped"] == [True], name  # the judged call mapped its output's stores every time
    assert seen["torch wrote them"]["shadowed"] == 0  # the judge would read no finding: no shadow ran
    # The worst element's program, then those of the other errors, each alone, none with a finding (x * 2 is exact
    # in float32), up to the cap...
    assert seen["a kernel wrote the worst"]["shadowed"] == MAX_FOLLOWED < rows
    assert seen["replay --explain"]["shadowed"] == rows  # ...every program where nothing says which
    assert seen["a gradient"]["shadowed"] == rows  # a gradient's map is found by its place: every program


@pytest.mark.slow
@runs_a_gate
def test_where_torch_wrote_the_failing_elements_the_gate_says_what_a_shadow_of_every_program_says(
    tmp_path: Path,
) -> None:
    (tmp_path / "halves.py").write_text(KERNELS)
    config = tmp_path / "gpuemu.toml"
    config.write_text(
        '[project]\nname = "t"\n[ci]\nquick_iterations = 4\n[[ops]]\nname = "half_in_torch"\n'
        'op = "halves:half_in_torch"\nreference = "halves:ref_double"\nframework = "torch"\n'
        'family = "elementwise"\ndtypes = ["float32"]\n[ops.dims]\nM = { min = 1, max = 16, typical = [8] }\n'
        'N = { min = 2, max = 512, typical = [256] }\n[ops.inputs]\nx = ["M", "N"]\n'
    )
    gpuemu("run", "--config", str(config), "--seed", "3", "--out", "out", cwd=tmp_path)
    (found,) = json.loads((tmp_path / "out" / "results.json").read_text())["ops"]
    assert found["status"] == "failed" and found["failures"]
    failure = found["failures"][0]
    assert "written by no watched Triton store" in failure["where"], failure["where"]
    assert replayed_where(config, "half_in_torch", failure["case_seed"], tmp_path) == failure["where"]
