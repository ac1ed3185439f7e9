"""What a GPU reads, through the real gate: masked-off lanes of a load without `other` read 0 (NVIDIA's and AMD's
lowering zeroes the register before the predicated load), so a correct kernel that relies on that 0 passes,
with a warning naming its line (Triton leaves the lanes undefined); `[ops.triton] undefined_masked_lanes`
makes it an error, silences it, or turns on the poison portability check. A mismatch says where its worst
element came from (masked lanes, TF32), and the TF32 a `tl.dot` ran at is said per op in results, terminal,
summary and comment. Kernels modelled on the ones that were false alarms under the poison fill: an RMSNorm at
N = 1025, a matmul at K = 100."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.triton_cpu.support_interpreter import checkout_env, gpuemu

pytest.importorskip("torch")
pytest.importorskip("triton")

KERNELS = textwrap.dedent("""
    import numpy as np
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def _rms_norm(x_ptr, w_ptr, y_ptr, stride, N, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_ptr + row * stride + cols, mask=mask).to(tl.float32)  # no `other`: the sum needs 0
        w = tl.load(w_ptr + cols, mask=mask).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
        tl.store(y_ptr + row * stride + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


    def rms_norm(x, w):
        x = x.contiguous()
        y = torch.empty_like(x)
        M, N = x.shape
        _rms_norm[(M,)](x, w.contiguous(), y, x.stride(0), N, 1e-6, BLOCK=triton.next_power_of_2(N))
        return y


    @triton.jit
    def _add_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n)  # no `other`, but the masked lanes are never stored
        tl.store(y_ptr + offs, x + 1.0, mask=offs < n)


    def add_one(x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _add_one[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64)
        return y


    @triton.jit
    def _matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            rk = k + tl.arange(0, BK)
            a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K))
            b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N))
            acc += tl.dot(a, b)  # fp32 at its default input precision: TF32 on NVIDIA
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


    def matmul(a, b):
        a, b = a.contiguous(), b.contiguous()
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), dtype=torch.float32)
        _matmul[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, BM=32, BN=32, BK=32)
        return c


    @triton.jit
    def _row_max(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * N + cols, mask=cols < N)  # the bug: a max needs other=-inf, not the GPU's 0
        tl.store(y_ptr + row, tl.max(x, axis=0))


    def row_max(x):
        x = x.contiguous()
        M, N = x.shape
        y = torch.empty(M, dtype=x.dtype)
        _row_max[(M,)](x, y, N, BLOCK=triton.next_power_of_2(N))
        return y


    @triton.jit
    def _prefix_sum(x_ptr, y_ptr, M, N, BLOCK: tl.constexpr):
        # 16 rows' prefix sums as x @ (upper-triangular ones), through tl.dot at its TF32 default: a scan loses
        # the 13 bits TF32 drops from every input
        rows = tl.program_id(0) * 16 + tl.arange(0, 16)
        i = tl.arange(0, BLOCK)
        at = rows[:, None] * N + i[None, :]
        inside = (rows[:, None] < M) & (i[None, :] < N)
        x = tl.load(x_ptr + at, mask=inside, other=0.0)
        ones = (i[:, None] <= i[None, :]).to(tl.float32)
        tl.store(y_ptr + at, tl.dot(x, ones), mask=inside)


    def prefix_sum(x):
        x = x.contiguous()
        M, N = x.shape
        y = torch.empty_like(x)
        _prefix_sum[(triton.cdiv(M, 16),)](x, y, M, N, BLOCK=max(16, triton.next_power_of_2(N)))
        return y


    @triton.jit
    def _tickets(counter_ptr, out_ptr):
        # each program writes its id at the slot an atomic counter hands it: the output follows the order the
        # programs ran in (the bug: the result was meant to be the ids in order)
        slot = tl.atomic_add(counter_ptr, 1)
        tl.store(out_ptr + slot, tl.program_id(0).to(tl.float32))


    def tickets(x):
        out = torch.zeros_like(x)
        _tickets[(x.numel(),)](torch.zeros(1, dtype=torch.int32), out)
        return out


    def ref_tickets(x):
        return np.arange(x.size, dtype=np.float64)


    def ref_rms_norm(x, w):
        return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6) * w


    def ref_add_one(x):
        return x + 1.0


    def ref_matmul(a, b):
        return a @ b


    def ref_row_max(x):
        return x.max(axis=1)


    def ref_prefix_sum(x):
        return np.cumsum(x, axis=1)
""")

OP = """
[[ops]]
name = "{name}"
op = "kernels:{fn}"
reference = "kernels:ref_{fn}"
family = "{family}"
dtypes = {dtypes}
{extra}
{body}
"""
ROWS = '[ops.dims]\nM = [3]\nN = { min = 1, max = 1100, typical = [1025] }\n[ops.inputs]\nx = ["M", "N"]\n'
NORM = ROWS + 'w = { dims = ["N"], kind = "affine_weight" }\n'
VECTOR = '[ops.dims]\nN = { min = 1, max = 300, typical = [100] }\n[ops.inputs]\nx = ["N"]\n'
TICKETS = '[ops.dims]\nN = { min = 2, max = 40, typical = [16] }\n[ops.inputs]\nx = ["N"]\n'
SCAN_ROWS = (
    '[ops.dims]\nM = [16, 32]\nN = { min = 1, max = 200, typical = [100] }\n[ops.inputs]\nx = ["M", "N"]\n'
)
MATMUL = (
    "[ops.dims]\nM = { min = 1, max = 48, typical = [40] }\nN = { min = 1, max = 48, typical = [33] }\n"
    'K = { min = 1, max = 120, typical = [100] }\n[ops.inputs]\na = ["M", "K"]\nb = ["K", "N"]\n'
)


def _op(name: str, fn: str, family: str, body: str, extra: str = "", dtypes: str = '["float32"]') -> str:
    return OP.format(name=name, fn=fn, family=family, dtypes=dtypes, extra=extra, body=body)


def _lanes(mode: str) -> str:
    return f'[ops.triton]\nundefined_masked_lanes = "{mode}"\n'


CONFIG = (
    '[project]\nname = "gpu-reads"\nframework = "torch"\n[ci]\nquick_iterations = 4\n'
    + _op("rms_norm", "rms_norm", "norm", NORM, dtypes='["float32", "bfloat16"]')
    + _op("rms_norm_error", "rms_norm", "norm", _lanes("error") + NORM)
    + _op("rms_norm_ignore", "rms_norm", "norm", _lanes("ignore") + NORM)
    + _op("rms_norm_poison", "rms_norm", "norm", _lanes("poison") + NORM)
    + _op("add_one", "add_one", "elementwise", VECTOR)
    + _op("matmul", "matmul", "matmul", MATMUL, 'output = ["M", "N"]')
    + _op("row_max", "row_max", "exact", ROWS, 'output = ["M"]', '["float32", "float16"]')
    + _op("prefix_sum", "prefix_sum", "scan", SCAN_ROWS)
    + _op("tickets", "tickets", "exact", TICKETS)
)  # fmt: skip


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, subprocess.CompletedProcess[str]]:
    root = tmp_path_factory.mktemp("reads")
    (root / "kernels.py").write_text(KERNELS)
    (root / "gpuemu.toml").write_text(CONFIG)
    done = gpuemu("run", "--seed", "2", "--out", "out", "--jobs", "2", "--no-lint", cwd=root)
    return root, json.loads((root / "out" / "results.json").read_text()), done


def _line(code: str) -> int:
    """The line of kernels.py that holds `code`."""
    return next(i for i, text in enumerate(KERNELS.splitlines(), 1) if code in text)


def _ops(ran: tuple) -> dict[str, dict]:
    return {op["name"]: op for op in ran[1]["ops"]}


@pytest.mark.slow
def test_a_correct_kernel_relying_on_masked_lanes_reading_zero_passes_with_a_warning_naming_its_line(
    ran: tuple,
) -> None:
    op = _ops(ran)["rms_norm"]
    assert op["status"] == "passed" and op["cases_skipped"] == 0, op
    [note] = [n for n in op["triton_notes"] if "masked lanes" in n]
    line = _line("x = tl.load(x_ptr + row * stride + cols, mask=mask)")
    assert note.startswith(
        f"`_rms_norm` at kernels.py:{line} (in _rms_norm) loads masked lanes without `other`"
    )
    assert "Triton leaves undefined; NVIDIA and AMD read 0 today" in note
    assert f"kernels.py:{_line('w = tl.load(w_ptr + cols, mask=mask)')}" not in note  # w's never reach y
    _, _, done = ran
    assert "loads masked lanes without `other`" in done.stderr  # the terminal says it too


@pytest.mark.slow
def test_undefined_masked_lanes_as_an_error_fails_the_case_and_ignore_says_nothing(ran: tuple) -> None:
    ops = _ops(ran)
    failures = ops["rms_norm_error"]["failures"]
    assert ops["rms_norm_error"]["status"] == "failed" and failures
    assert {f["kind"] for f in failures} == {"undefined_masked_lanes"}
    assert 'undefined_masked_lanes = "error"' in failures[0]["message"]
    assert ops["rms_norm_ignore"]["status"] == "passed" and ops["rms_norm_ignore"]["triton_notes"] == []


@pytest.mark.slow
def test_the_poison_portability_check_fails_the_kernel_and_says_where_the_lanes_came_from(ran: tuple) -> None:
    op = _ops(ran)["rms_norm_poison"]
    assert op["status"] == "failed"
    message = op["failures"][0]["message"]
    assert f"kernels.py:{_line('mask=mask).to(tl.float32)  # no')}" in message and "NaN/+Inf/-Inf" in message


@pytest.mark.slow
def test_a_load_whose_masked_lanes_are_never_stored_is_not_reported(ran: tuple) -> None:
    op = _ops(ran)["add_one"]
    assert op["status"] == "passed" and op["triton_notes"] == []


@pytest.mark.slow
def test_a_matmul_at_k_100_passes_and_tf32_is_said_out_loud(ran: tuple) -> None:
    root, _, done = ran
    op = _ops(ran)["matmul"]
    assert op["status"] == "passed" and op["triton_dot_precisions"] == ["tf32"]
    notes = op["triton_notes"]
    assert any("masked lanes without `other`" in n for n in notes)  # K = 100 in tiles of 32
    assert any(
        "leaves input_precision at its default" in n and "which the matmul bound allows for" in n
        for n in notes
    )
    assert "tl.dot in tf32: the matmul bound allowed for inputs rounded to TF32" in done.stderr
    summary = subprocess.run(
        [sys.executable, "-m", "gpuemu_ci", "render", "summary", "out/results.json"], cwd=root,
        env=checkout_env(), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert summary.returncode == 0, summary.stderr
    assert "tl.dot in tf32" in summary.stdout and "masked lanes without \\`other\\`" in summary.stdout


@pytest.mark.slow
def test_a_max_reading_masked_lanes_as_zero_is_caught_and_the_mismatch_says_why(ran: tuple) -> None:
    op = _ops(ran)["row_max"]
    assert op["status"] == "failed"
    message = next(f["message"] for f in op["failures"] if f["kind"] == "mismatch")
    assert "Its worst element depends on masked-off lanes of loads without `other`" in message
    assert "kernels.py:" in message


@pytest.mark.slow
def test_a_scan_through_a_tf32_dot_fails_and_the_mismatch_names_tf32(ran: tuple) -> None:
    op = _ops(ran)["prefix_sum"]
    assert op["status"] == "failed" and op["triton_dot_precisions"] == ["tf32"]
    message = next(f["message"] for f in op["failures"] if f["kind"] == "mismatch")
    assert (
        "Its worst element depends on TF32 rounding" in message and "the scan bound does not allow" in message
    )


@pytest.mark.slow
def test_a_result_that_follows_the_program_order_fails_and_says_so(ran: tuple) -> None:
    op = _ops(ran)["tickets"]
    assert op["status"] == "failed"
    message = next(f["message"] for f in op["failures"] if f["kind"] == "mismatch")
    assert "Its worst element depends on the order the launch's programs ran in" in message
