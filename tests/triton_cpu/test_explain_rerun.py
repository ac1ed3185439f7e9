"""The explain re-run of recorded failures through the real gate (pipeline/explain_rerun.py): a failing Triton
case gets its "where" from a second run with `CaseSpec.explain`, whose masked-load `other` what-if
(backends/masked_other.py) names a load only where reading a neutral value fixes the failing elements; a kernel
whose outputs change from run to run keeps its first failure. And the op side of a case that is not explained
logs no store."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.support_tiers import runs_a_gate
from tests.triton_cpu.support_interpreter import gpuemu, run_interpreted

pytest.importorskip("torch")
pytest.importorskip("triton")

KERNELS = textwrap.dedent("""
import os
import torch
import triton
import triton.language as tl


@triton.jit
def _softmax(x_ptr, y_ptr, n, scale, OTHER: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    if OTHER == 0:
        x = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0)  # OTHER ZERO LOAD
    else:
        x = tl.load(x_ptr + row * n + cols, mask=mask, other=-float("inf"))  # OTHER INF LOAD
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n + cols, e / tl.sum(e, axis=0) * scale, mask=mask)  # STORE LINE


def _launch(x, other, scale):
    x = x.contiguous()
    y = torch.empty_like(x)
    rows, n = x.shape
    _softmax[(rows,)](x, y, n, scale, OTHER=other, BLOCK=triton.next_power_of_2(n))
    return y


def softmax_other_zero(x):
    return _launch(x, 0, 1.0)


def softmax_wrong_scale(x):
    return _launch(x, 1, 1.05)


def softmax_flaky(x):
    y = _launch(x, 1, 1.0)
    ticket = 0
    while True:  # a fresh ticket per call, across processes: each call spoils another element
        try:
            os.close(os.open(f"ticket-{ticket}", os.O_CREAT | os.O_EXCL))
            break
        except FileExistsError:
            ticket += 1
    y.view(-1)[ticket % y.numel()] += 1.0
    return y


@triton.jit
def _row_copy(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_ptr += row * stride  # ROW OFFSET
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + cols, mask=cols < n, other=0.0)  # ROW LOAD
    tl.store(y_ptr + row * n + cols, x, mask=cols < n)


def row_copy_wrong_stride(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    rows, n = x.shape
    _row_copy[(rows,)](x, y, n, n + 1, BLOCK=triton.next_power_of_2(n))  # the bug: one past each row
    return y


@triton.jit
def _scaled_by_sum(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=0.0)
    inv = 1.0 / tl.sum(x * 0.0, axis=0)  # DIV BY ZERO (the bug: a sum that is always 0)
    tl.store(y_ptr + row * n + cols, x * inv * 0.0 + x, mask=cols < n)


def copy_div_zero(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    rows, n = x.shape
    _scaled_by_sum[(rows,)](x, y, n, BLOCK=triton.next_power_of_2(n))
    return y


def ref_copy(x):
    return x.copy()


def ref_softmax(x):
    import numpy as np
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
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
M = {{ min = 2, max = 6, typical = [3] }}
N = {{ min = 20, max = 60, typical = [37] }}
[ops.inputs]
x = ["M", "N"]
"""
OPS = {
    "softmax_other_zero": ("ref_softmax", "softmax"),
    "softmax_wrong_scale": ("ref_softmax", "softmax"),
    "softmax_flaky": ("ref_softmax", "softmax"),
    "row_copy_wrong_stride": ("ref_copy", "exact"),
    "copy_div_zero": ("ref_copy", "exact"),
}


def _line(marker: str) -> int:
    return next(i for i, text in enumerate(KERNELS.splitlines(), 1) if marker in text)


@pytest.fixture(scope="module")
@runs_a_gate
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, subprocess.CompletedProcess[str]]:
    tmp_path = tmp_path_factory.mktemp("explain")
    (tmp_path / "kernels.py").write_text(KERNELS)
    config = '[project]\nname = "t"\n[ci]\nquick_iterations = 4\n' + "".join(
        OP.format(name=name, ref=ref, family=family) for name, (ref, family) in OPS.items()
    )
    (tmp_path / "gpuemu.toml").write_text(config)
    done = gpuemu(
        "run", "--config", "gpuemu.toml", "--seed", "3", "--out", "out", "--jobs", "2", cwd=tmp_path
    )
    return tmp_path, json.loads((tmp_path / "out" / "results.json").read_text()), done


def _failures(document: dict, name: str) -> list[dict]:
    op = next(o for o in document["ops"] if o["name"] == name)
    assert op["status"] == "failed" and op["failures"], op
    return list(op["failures"])


@pytest.mark.slow
def test_a_load_whose_other_is_the_bug_is_named_by_the_what_if(run: tuple) -> None:
    _, document, _ = run
    line = _line("OTHER ZERO LOAD")
    for failure in _failures(document, "softmax_other_zero"):
        assert failure["where"].startswith(
            f"the load at kernels.py:{line} (in _softmax) reads 0 in its masked-off lanes (`other`); reading -inf "
            "there brings the failing elements within their allowance; stored by program"
        ), failure["where"]


@pytest.mark.slow
def test_a_load_with_other_is_not_named_when_the_bug_is_elsewhere(run: tuple) -> None:
    _, document, _ = run
    for failure in _failures(document, "softmax_wrong_scale"):
        # the masked lanes read -inf, right for a max; 0, +inf and 1 change the outputs but fix nothing
        assert "masked-off lanes" not in failure["where"]
        assert failure["where"].startswith("stored by program"), failure["where"]
        assert f"at kernels.py:{_line('STORE LINE')} (in _softmax)" in failure["where"]


@pytest.mark.slow
def test_a_failure_whose_rerun_fails_elsewhere_keeps_its_first_verdict_and_says_so(run: tuple) -> None:
    _, document, _ = run
    for failure in _failures(document, "softmax_flaky"):
        assert failure["kind"] == "mismatch"
        assert failure["where"].startswith(
            "the re-run did not fail the same way (it failed with its worst element at"
        )


@pytest.mark.slow
def test_an_out_of_bounds_access_names_the_lines_its_pointer_was_offset_at(run: tuple) -> None:
    _, document, _ = run
    offset, load = _line("ROW OFFSET"), _line("ROW LOAD")
    for failure in _failures(document, "row_copy_wrong_stride"):
        assert failure["kind"] == "out_of_bounds"
        assert f"at kernels.py:{load} (in _row_copy)" in failure["message"]  # the finding names the access
        assert failure["where"] == (
            f"the load's pointer was offset at kernels.py:{offset} (in _row_copy), then at kernels.py:{load} "
            f"(in _row_copy), before its load at kernels.py:{load} (in _row_copy)"
        )


@pytest.mark.slow
def test_a_non_finite_output_names_the_first_operation_that_made_one_from_finite_operands(run: tuple) -> None:
    _, document, _ = run
    for failure in _failures(document, "copy_div_zero"):
        assert failure["kind"] == "mismatch"  # the exact comparison's name for a NaN where a value belongs
        assert failure["where"].startswith(
            "the first non-finite value the kernels made from finite operands: `fdiv` at "
            f"kernels.py:{_line('DIV BY ZERO')} (in _scaled_by_sum), program ("
        ), failure["where"]


NOT_EXPLAINED = textwrap.dedent("""
    import json
    from pathlib import Path
    from gpuemu_ci.backends.interface import CaseSpec
    from gpuemu_ci.backends.op_side import run_op_side
    from tests.backends.support_cases import first_case, op_task

    root = Path(__file__).parent
    (root / "softmaxes.py").write_text(KERNELS)
    task = op_task(root, "softmaxes:softmax_wrong_scale", "softmaxes:ref_softmax", schema=SCHEMA,
                   extra='family = "softmax"\\nframework = "torch"')
    case = first_case(task)
    seen = {}
    for explain in (False, True):
        side = run_op_side(task, CaseSpec(case.seed, case.index, explain=explain))
        seen[str(explain)] = {"stores": [s is not None for s in side.triton.stores],
                              "masked_others": [list(m) for m in side.triton.masked_others],
                              "explained": len(side.triton.explained)}
    print(json.dumps(seen))
""")


@pytest.mark.slow  # a fresh interpreter with Triton (about 10 s)
def test_only_an_explained_case_logs_its_stores_and_runs_the_what_ifs(tmp_path: Path) -> None:
    schema = (
        '[ops.dims]\nM = { min = 2, max = 4 }\nN = { min = 20, max = 40 }\n[ops.inputs]\nx = ["M", "N"]\n'
    )
    script = f"KERNELS = {KERNELS!r}\nSCHEMA = {schema!r}\n" + NOT_EXPLAINED
    seen = run_interpreted(script, tmp_path)
    assert seen["False"] == {"stores": [], "masked_others": [], "explained": 0}
    assert seen["True"]["stores"] == [True]
    site = f"kernels.py:{_line('OTHER INF LOAD')} (in _softmax)".replace("kernels.py", "softmaxes.py")
    assert seen["True"]["masked_others"] == [[site, float("-inf")]]
    assert (
        seen["True"]["explained"] == 3
    )  # 0, +inf and 1 each change the outputs (the judge finds none fixes)
