"""Which programs an explain re-run's float64 shadow follows (backends/explain_shadow.py), on the op side of a real
Triton kernel under the interpreter: those that stored the failure's worst element and its largest errors; every
program where nothing says which (`replay --explain`) or the failing output is a gradient; none where torch, not a
watched store, wrote every element the judge would read a finding for."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from gpuemu_ci.backends.explain import MAX_OVER
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
    import numpy as np
    from gpuemu_ci.backends.explain import over_mask, over_order
    from gpuemu_ci.backends.interface import CaseSpec, ExplainFocus
    from gpuemu_ci.backends.op_side import run_op_side
    from gpuemu_ci.fuzz.case import build_case
    from tests.backends.support_cases import first_case, op_task

    root = Path(__file__).parent
    (root / "halves.py").write_text(KERNELS)
    schema = '[ops.dims]\\nM = { min = 12, max = 12 }\\nN = { min = 800, max = 800 }\\n[ops.inputs]\\nx = ["M", "N"]\\n'
    task = op_task(root, "halves:half_in_torch", "halves:ref_double", schema=schema,
                   extra='family = "elementwise"\\nframework = "torch"')
    case = first_case(task)
    rows, n = build_case(task.op, case.seed, task.root).arrays["x"].shape

    def focus(ratio, worst, gradient=False, mask=True):
        # What the first run's judge sends for a failure whose errors / allowances are `ratio`.
        return ExplainFocus(worst, over_order(ratio), ratio.shape, gradient, over_mask(ratio) if mask else b"")

    few = np.zeros((rows, n)); few[:2, n // 2 :] = 2.0  # 800 elements over, all written by torch
    half = np.zeros((rows, n)); half[:, n // 2 :] = 2.0  # 4,800 over: more than the first run names
    and_one = half.copy(); and_one[5, 0] = 1.5  # ... and one the kernel wrote, not among the largest named
    kernel = np.zeros((rows, n)); kernel[:, : n // 2] = 2.0
    focuses = {
        "torch wrote them": focus(few, (0, n - 1)),
        "torch wrote them, more than named": focus(half, (0, n - 1)),
        "more than named, no mask": focus(half, (0, n - 1), mask=False),
        "a kernel wrote one not named": focus(and_one, (0, n - 1)),
        "a kernel wrote the worst": focus(kernel, (3, 0)),
        "a gradient": focus(few, (0, n - 1), gradient=True),
        "replay --explain": None,
    }
    seen = {"rows": rows, "named": [len(f.over) for f in focuses.values() if f is not None]}
    for name, chosen in focuses.items():
        side = run_op_side(task, CaseSpec(case.seed, case.index, explain=True, explain_focus=chosen))
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
    assert MAX_OVER < 4800  # half the output over is more than the first run's judge names
    assert seen["named"] == [800, MAX_OVER, MAX_OVER, MAX_OVER, MAX_OVER, 800]
    for name in seen.keys() - {"rows", "named"}:
        assert seen[name]["mapped"] == [True], name  # the judged call mapped its output's stores every time
    # No watched store wrote an element the judge would read a finding for: no shadow ran.
    assert seen["torch wrote them"]["shadowed"] == 0
    assert seen["torch wrote them, more than named"]["shadowed"] == 0  # the mask says so of those not named
    # Where nothing says which elements, or a kernel wrote one of them, every program is shadowed...
    assert seen["more than named, no mask"]["shadowed"] == rows
    assert seen["a kernel wrote one not named"]["shadowed"] == rows
    assert seen["replay --explain"]["shadowed"] == rows
    assert seen["a gradient"]["shadowed"] == rows  # (a gradient's map is found by its place, not its shape)
    # ... and where one wrote the worst element, its program, then those of the other errors, each alone, none with
    # a finding (x * 2 is exact in float32), up to the cap.
    assert seen["a kernel wrote the worst"]["shadowed"] == MAX_FOLLOWED < rows


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
        'family = "elementwise"\ndtypes = ["float32"]\n[ops.dims]\nM = { min = 16, max = 16 }\n'
        'N = { min = 1024, max = 1024 }\n[ops.inputs]\nx = ["M", "N"]\n'
    )
    gpuemu("run", "--config", str(config), "--seed", "3", "--out", "out", cwd=tmp_path)
    (found,) = json.loads((tmp_path / "out" / "results.json").read_text())["ops"]
    assert found["status"] == "failed" and found["failures"]
    failure = found["failures"][0]
    assert "written by no watched Triton store" in failure["where"], failure["where"]
    assert (
        failure["exceeded"] > MAX_OVER
    )  # more over than the first run names: the mask says where the rest are
    assert replayed_where(config, "half_in_torch", failure["case_seed"], tmp_path) == failure["where"]
