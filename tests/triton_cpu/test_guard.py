"""The op under test cannot switch the Triton layer's checks off from inside its own process (issue #45, item 5),
and cases the layer cannot judge never add up to a green gate, through the real gate.

Each hostile op below launches a kernel that stores past the end of its output (an out-of-bounds finding
under the layer) after disabling the layer a different way: clearing its record of the running call, taking
its hooks off the interpreter, rebinding one of its functions at import. Each must fail as `tampered`, and
the layer must be back in place for the next op in the same workers (the honest op after them still has its
out-of-bounds store caught)."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.triton_cpu.support_interpreter import gpuemu

pytest.importorskip("torch")
pytest.importorskip("triton")

KERNELS = textwrap.dedent("""
    import torch
    import triton
    import triton.language as tl

    from gpuemu_ci.triton_cpu import active, layer


    @triton.jit
    def _double(x_ptr, y_ptr, n, BLOCK: tl.constexpr, MASKED: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        if MASKED:
            tl.store(y_ptr + offs, x * 2.0, mask=offs < n)
        else:
            tl.store(y_ptr + offs, x * 2.0)  # past the end of y on the last program: the layer stops it


    def launch(x, masked):
        x = x.contiguous()
        y = torch.empty_like(x)
        _double[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64, MASKED=masked)
        return y


    def honest(x):
        return launch(x, False)


    def clears_the_call(x):
        active.RUNNING.call = None  # the launch then takes the plain interpreter's path
        return launch(x, True)


    def unhooks_the_interpreter(x):
        layer.unpatch(active.call())  # the interpreter's own methods back
        return launch(x, True)


    @triton.jit
    def _asm(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
        tl.store(y_ptr + offs, y + 1.0, mask=offs < n)  # wrong: the reference is x itself


    def asm(x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _asm[(1,)](x, y, x.numel(), BLOCK=512)
        return y


    @triton.jit
    def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n, other=0.0), mask=offs < n)


    def copy(x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _copy[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64)
        return y


    def ref_double(x):
        return 2.0 * x


    def ref_same(x):
        return x
""")

REBINDING = textwrap.dedent("""
    from gpuemu_ci.triton_cpu import accesses
    from gpuemu_ci.triton_cpu.memory import Lanes

    import kernels


    def unchecked(call, launch, access, pointers, mask, base=None):
        flat, flat_mask = accesses.active_lanes(pointers, mask)
        return Lanes(flat), flat_mask  # the lanes, as the check returns them, never checked


    accesses.checked = unchecked  # at import: every bounds check a no-op


    def rebinds_a_check(x):
        return kernels.launch(x, True)
""")

OP = """
[[ops]]
name = "{name}"
op = "{module}:{name}"
reference = "kernels:{ref}"
framework = "torch"
family = "elementwise"
dtypes = ["float32"]
[ops.dims]
N = {{ min = 1, max = 300, typical = [100] }}
[ops.inputs]
x = ["N"]
"""
HEADER = '[project]\nname = "guard"\n[ci]\nquick_iterations = 4\n'


def _run(root: Path, ops: list[tuple[str, str]], out: str) -> tuple[dict, subprocess.CompletedProcess[str]]:
    (root / "kernels.py").write_text(KERNELS)
    (root / "rebinding.py").write_text(REBINDING)
    config = root / f"{out}.toml"
    body = "".join(
        OP.format(name=name, ref=ref, module="rebinding" if name == "rebinds_a_check" else "kernels")
        for name, ref in ops
    )
    config.write_text(HEADER + body)
    done = gpuemu(
        "run", "--config", str(config), "--seed", "4", "--out", out, "--jobs", "1", "--no-lint", cwd=root
    )
    return json.loads((root / out / "results.json").read_text()), done


@pytest.mark.slow
def test_an_op_that_disables_the_layer_fails_as_tampered_and_the_next_op_is_checked(tmp_path: Path) -> None:
    ops = [
        ("clears_the_call", "ref_double"),
        ("unhooks_the_interpreter", "ref_double"),
        ("honest", "ref_double"),
    ]
    results, done = _run(tmp_path, ops, "hostile")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    found = {op["name"]: {f["kind"] for f in op["failures"]} for op in results["ops"]}
    assert "tampered" in found["clears_the_call"], found
    assert "tampered" in found["unhooks_the_interpreter"], found
    assert found["honest"] == {"out_of_bounds"}, found  # one worker ran all three ops in turn
    message = next(op for op in results["ops"] if op["name"] == "clears_the_call")["failures"][0]["message"]
    assert "the op changed gpuemu-ci's Triton layer while it ran" in message


@pytest.mark.slow
def test_an_op_module_that_rebinds_a_check_at_import_fails_as_tampered(tmp_path: Path) -> None:
    results, done = _run(tmp_path, [("rebinds_a_check", "ref_double"), ("honest", "ref_double")], "import")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    ops = {op["name"]: op for op in results["ops"]}
    [tampered] = [f for f in ops["rebinds_a_check"]["failures"] if f["kind"] == "tampered"][:1]
    assert "gpuemu_ci.triton_cpu.accesses.checked" in tampered["message"]
    assert {f["kind"] for f in ops["honest"]["failures"]} == {"out_of_bounds"}


@pytest.mark.slow
def test_a_wrong_kernel_whose_cases_cannot_be_judged_never_makes_the_gate_green(tmp_path: Path) -> None:
    """Inline assembly runs only on a GPU: next to an op that passes, the run is an error (exit 3), not a pass."""
    results, done = _run(tmp_path, [("copy", "ref_same"), ("asm", "ref_same")], "unjudged")
    assert done.returncode == 3, done.stdout[-2000:] + done.stderr[-2000:]
    ops = {op["name"]: op for op in results["ops"]}
    assert ops["copy"]["status"] == "passed" and ops["asm"]["status"] == "error"
    assert results["verdict"] != "passed"
