"""`gpuemu-ci run` end to end: verdicts, exit codes, results.json, and every kind of bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES
from tests.support_cli import run_cli


def run(args: list[str]) -> tuple[int, str, str]:
    """`gpuemu-ci run ARGS` through the CLI harness: (exit code, stdout, stderr)."""
    result = run_cli(["run", *args])
    return result.code, result.stdout, result.stderr


@pytest.mark.slow
def test_quickstart_passes_and_writes_results(tmp_path):
    code, out, err = run(["--config", str(EXAMPLES / "quickstart" / "gpuemu.toml"), "--out", str(tmp_path)])
    assert code == 0, err
    assert out == ""  # machine output only with --json
    document = json.loads((tmp_path / "results.json").read_text())
    assert document["verdict"] == "passed" and document["exit_code"] == 0
    # quick: 16 cases in float32, the first 8 slots in bfloat16, and one more bfloat16 tile case for attention,
    # whose four varying dims (B, S, T, D) each reach their declared max once per dtype
    assert document["summary"]["ops_passed"] == 6 and document["summary"]["cases_total"] == 6 * (16 + 8) + 1
    assert document["seed"] == 20261122
    assert all(op["failures"] == [] for op in document["ops"])
    assert "PASSED" in err


@pytest.mark.slow
def test_buggy_example_fails_with_a_replayable_seed(tmp_path):
    code, _, err = run(
        [
            "--config",
            str(EXAMPLES / "buggy" / "gpuemu.toml"),
            "--out",
            str(tmp_path),
            "--op",
            "softmax",
            "--op",
            "gelu",
        ],
    )
    assert code == 1
    document = json.loads((tmp_path / "results.json").read_text())
    softmax = document["ops"][0]
    assert softmax["status"] == "failed" and document["ops"][1]["status"] == "passed"
    failure = softmax["failures"][0]
    assert failure["kind"] == "mismatch"
    assert any(n % 64 for n in failure["shapes"]["x"][1:])  # the tail-mask bug needs N % BLOCK != 0
    assert f"--seed {failure['case_seed']}" in failure["replay"] and failure["replay"] in err
    assert (tmp_path / failure["snapshot"]).is_file()
    # The printed replay command reproduces the failure.
    replayed = run_cli([*failure["replay"].split()[1:], "--out", str(tmp_path / "replay")])
    assert replayed.code == 1
    assert "REPRODUCED" in replayed.stderr


@pytest.mark.slow
def test_json_flag_prints_exactly_the_results_file(tmp_path):
    code, out, _ = run(
        [
            "--config",
            str(EXAMPLES / "quickstart" / "gpuemu.toml"),
            "--out",
            str(tmp_path),
            "--op",
            "gelu",
            "--iterations",
            "2",
            "--json",
        ],
    )
    assert code == 0
    assert json.loads(out) == json.loads((tmp_path / "results.json").read_text())


@pytest.mark.slow
def test_seed_dtype_and_iterations_flags(tmp_path):
    code, _, _ = run(
        [
            "--config",
            str(EXAMPLES / "quickstart" / "gpuemu.toml"),
            "--out",
            str(tmp_path),
            "--op",
            "cumsum",
            "--dtype",
            "fp16",
            "--iterations",
            "3",
            "--seed",
            "99",
        ],
    )
    assert code == 0
    document = json.loads((tmp_path / "results.json").read_text())
    (op,) = document["ops"]
    assert document["seed"] == 99 and op["cases_total"] == 3
    assert [d["dtype"] for d in op["dtypes"]] == ["float16"]


@pytest.mark.slow
def test_thorough_suite_runs_every_dtype(tmp_path, simple_project):
    config = simple_project()
    # The large class (past 2^31 elements) may not fit this machine: skipped, allowed here, said in the verdict.
    args = ["--config", str(config), "--out", str(tmp_path), "--suite", "thorough", "--iterations", "2"]
    code, _, err = run([*args, "--allow-skips"])
    assert code == 0, err
    skipped = json.loads((tmp_path / "results.json").read_text())["summary"]["cases_skipped"]
    assert (f"PASSED with {skipped} skipped" if skipped else "PASSED -") in err
    (op,) = json.loads((tmp_path / "results.json").read_text())["ops"]
    assert sorted(d["dtype"] for d in op["dtypes"]) == ["float16", "float32"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("op", "reference", "code", "kind", "text"),
    [
        ("myops.ops:wrong_shape", "myops.ops:scale_ref", 1, "shape", "shape"),
        ("myops.ops:wrong_dtype", "myops.ops:scale_ref", 1, "dtype", "dtype float64 != expected"),
    ],
)
def test_op_returning_wrong_shape_or_dtype_fails(tmp_path, simple_project, op, reference, code, kind, text):
    got, _, err = run(["--config", str(simple_project(op, reference)), "--out", str(tmp_path)])
    assert got == code
    (op_result,) = json.loads((tmp_path / "results.json").read_text())["ops"]
    assert op_result["failures"][0]["kind"] == kind and text in op_result["failures"][0]["message"]
    assert "Traceback" not in err


@pytest.mark.slow
def test_reference_that_raises_is_an_error_not_a_pass(tmp_path, simple_project):
    code, _, err = run(
        ["--config", str(simple_project(reference="myops.ops:raises")), "--out", str(tmp_path)]
    )
    assert code == 3
    document = json.loads((tmp_path / "results.json").read_text())
    assert document["verdict"] == "error" and document["ops"][0]["status"] == "error"
    assert "reference blew up" in document["ops"][0]["failures"][0]["message"]
    assert "could not be judged" in err


@pytest.mark.slow
def test_op_that_does_not_import_is_a_config_error(tmp_path, simple_project):
    code, _, err = run(["--config", str(simple_project(op="myops.nothere:scale")), "--out", str(tmp_path)])
    assert code == 2
    assert "could not be loaded" in err and "myops.nothere" in err
    assert json.loads((tmp_path / "results.json").read_text())["ops"][0]["status"] == "error"


def test_nothing_executed_is_exit_3_never_green(tmp_path, make_project):
    config = make_project("""
        [[ops]]
        name = "gpu_only"
        op = "m:f"
        reference = "m:f"
        framework = "cupy"
        [ops.dims]
        N = [8]
        [ops.inputs]
        x = ["N"]
    """)
    from gpuemu_ci.backends import detect_gpu

    if detect_gpu() is not None:
        pytest.skip("a GPU is present: the op would run")
    code, _, err = run(["--config", str(config), "--out", str(tmp_path)])
    document = json.loads((tmp_path / "results.json").read_text())
    assert document["ops"][0]["status"] == "skipped" and document["ops"][0]["skip_reason"] == "no GPU"
    assert code == 3 and document["verdict"] == "error"
    assert "SKIP" in err
    code, _, _ = run(["--config", str(config), "--out", str(tmp_path), "--require-gpu"])
    assert code == 3
    assert json.loads((tmp_path / "results.json").read_text())["ops"][0]["status"] == "error"


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--config", "does-not-exist.toml"], "config file not found"),
        (["--op", "nope"], "--op 'nope' is not an op"),
        (["--dtype", "float99"], "--dtype 'float99' is not a dtype"),
        (["--suite", "weekly"], "Invalid value for '--suite'"),
    ],
)
def test_bad_usage_is_exit_2_with_a_message(tmp_path, args, text):
    base = ["--config", str(EXAMPLES / "quickstart" / "gpuemu.toml"), "--out", str(tmp_path)]
    code, _, err = run([*base, *args])
    assert code == 2
    assert text in err and "Traceback" not in err
    assert not (tmp_path / "results.json").exists()  # nothing half-written


@pytest.mark.slow
def test_config_errors_through_the_real_entry_point(tmp_path):
    (tmp_path / "gpuemu.toml").write_text("[[ops]]\nname = 'a'\nop = 'm:f'\nreference = 'm:f'\nfamly = 'x'\n")
    result = subprocess.run(
        [sys.executable, "-m", "gpuemu_ci", "run"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "gpuemu.toml:5: unknown key `famly`" in result.stderr and "did you mean `family`" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


@pytest.mark.slow
def test_suite_timeout_writes_partial_results_and_never_passes(tmp_path):
    code, _, err = run(
        [
            "--config",
            str(EXAMPLES / "quickstart" / "gpuemu.toml"),
            "--out",
            str(tmp_path),
            "--timeout",
            "0.001",
            "--jobs",
            "1",
        ],
    )
    document = json.loads((tmp_path / "results.json").read_text())
    assert code == 3 and document["verdict"] == "incomplete" and document["cut_short"] is True
    assert "cut short" in err


@pytest.mark.slow
def test_results_name_the_config_relative_to_the_working_directory(tmp_path, monkeypatch):
    # Relative to the repository root (where Actions runs), so annotations point at it; no machine paths.
    args = [
        "run",
        "--config",
        str(EXAMPLES / "quickstart" / "gpuemu.toml"),
        "--out",
        str(tmp_path),
        "--op",
        "gelu",
        "--iterations",
        "1",
    ]
    run_cli(args, cwd=EXAMPLES.parent)
    text = (tmp_path / "results.json").read_text()
    assert str(EXAMPLES) not in text
    assert json.loads(text)["config"]["path"] == "examples/quickstart/gpuemu.toml"
    run_cli(args, cwd=tmp_path)
    assert json.loads((tmp_path / "results.json").read_text())["config"]["path"] == "gpuemu.toml"


def test_help_lists_every_command():
    result = run_cli(["--help"])
    assert result.code == 0
    out = result.stdout
    for command in ("run", "replay", "minimize", "calibrate", "lint", "verify"):
        assert command in out


@pytest.mark.slow
def test_launchable_kernel_is_linted_and_skipped_without_a_gpu(tmp_path, make_project):
    """A [[kernels]] entry with a launch table: linted by nvcc here, validated through CuPy only on a GPU."""
    import shutil

    from gpuemu_ci.backends import detect_gpu

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    if detect_gpu() is not None:
        pytest.skip("a GPU is present: the kernel would run")
    source = (Path(__file__).parents[1] / "fixtures" / "ptx-lint" / "src" / "gelu.cu").read_text()
    config = make_project(
        """
        [project]
        name = "cuda"
        [[ops]]
        name = "scale"
        op = "m:scale"
        reference = "m:scale"
        family = "exact"
        [ops.dims]
        N = [8]
        [ops.inputs]
        x = ["N"]

        [[kernels]]
        name = "gelu_cuda"
        source = "gelu.cu"
        archs = ["sm_80"]
        reference = "m:gelu_ref"
        family = "elementwise"
        dtypes = ["float32"]
        [kernels.dims]
        N = { min = 1, max = 4096, typical = [1024] }
        [kernels.inputs]
        x = ["N"]
        [kernels.launch]
        kernel = "gelu"
        grid = ["ceil(N / 256)"]
        block = [256]
        args = ["x", "out", "N"]
        output = ["N"]
        [kernels.artifact_checks]
        max_registers = 64
    """,
        {
            "gelu.cu": source,
            "m.py": "import numpy as np\ndef scale(x):\n    return x.copy()\n"
            "def gelu_ref(x):\n    return 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x**3)))\n",
        },
    )
    code, _, _ = run(["--config", str(config), "--out", str(tmp_path)])
    document = json.loads((tmp_path / "results.json").read_text())
    ops = {op["name"]: op for op in document["ops"]}
    assert ops["scale"]["status"] == "passed"
    assert ops["gelu_cuda"]["status"] == "skipped" and ops["gelu_cuda"]["skip_reason"] == "no GPU"
    assert document["kernels"][0]["status"] == "passed" and document["lint"]["status"] == "ran"
    assert code == 3  # the skip is reported and never part of a pass (issue 41)
    assert document["summary"]["ops_skipped"] == 1 and document["verdict"] == "error"
    code, _, err = run(["--config", str(config), "--out", str(tmp_path / "allowed"), "--allow-skips"])
    assert code == 0 and "PASSED with 1 skipped" in err, err


@pytest.mark.slow
def test_calibrate_never_counts_what_it_could_not_measure(tmp_path, simple_project):
    """An op that needs a GPU, on a machine without one: not measured, said, and exit 3 (0 with allow_skips)."""
    from gpuemu_ci.backends import detect_gpu

    if detect_gpu() is not None:
        pytest.skip("a GPU is present: the op would run")
    config = simple_project(extra="require_gpu = true")
    calibrated = run_cli(["calibrate", "--config", str(config), "--iterations", "2"])
    assert calibrated.code == 3, calibrated.output
    assert "not measured here: scale: needs a GPU and none was found" in calibrated.stderr
    assert "nothing was measured" in calibrated.stderr


@pytest.mark.slow
def test_calibrate_reports_headroom_per_dtype_and_shape_class():
    calibrated = run_cli(
        [
            "calibrate",
            "--config",
            str(EXAMPLES / "quickstart" / "gpuemu.toml"),
            "--op",
            "matmul",
            "--iterations",
            "4",
            "--json",
        ]
    )
    rows = json.loads(calibrated.stdout)
    assert calibrated.code == 0
    assert {row["dtype"] for row in rows} == {"float32", "float16", "bfloat16"}
    assert all(
        row["worst_headroom"] < 1.0 and "atol" not in row for row in rows
    )  # percentiles only on request
    with_percentiles = run_cli(
        [
            "calibrate",
            "--config",
            str(EXAMPLES / "quickstart" / "gpuemu.toml"),
            "--op",
            "gelu",
            "--iterations",
            "2",
            "--percentile",
            "99",
            "--json",
        ]
    )
    assert with_percentiles.code == 0
    assert all("atol" in row and "rtol" in row for row in json.loads(with_percentiles.stdout))


@pytest.mark.parametrize("text", ["", "[project]\nname = 'empty'\n", "[ci]\nquick_iterations = 4\n"])
def test_a_config_with_nothing_to_test_is_a_config_error(tmp_path, text):
    (tmp_path / "gpuemu.toml").write_text(text)
    code, _, err = run(["--config", str(tmp_path / "gpuemu.toml"), "--out", str(tmp_path / "out")])
    assert code == 2
    assert "declares no [[ops]] or [[kernels]]: there is nothing to test" in err
    assert not (tmp_path / "out" / "results.json").exists()


@pytest.mark.slow
def test_a_run_cut_short_by_timeout_that_found_a_failure_exits_1_and_names_the_setting(tmp_path):
    config = EXAMPLES / "buggy" / "gpuemu.toml"
    code, _, _ = run(
        ["--config", str(config), "--out", str(tmp_path), "--suite", "thorough", "--timeout", "1"]
    )
    document = json.loads((tmp_path / "results.json").read_text())
    assert document["cut_short"] is True
    if document["summary"]["cases_failed"]:  # a failure found before the cut decides: exit 1, not 3
        assert code == 1 and document["verdict"] == "failed"
    else:
        assert code == 3 and document["verdict"] == "incomplete"
    assert any("cut short after 1 s (--timeout)" in note for note in document["notes"])
    assert "ci.thorough_timeout" not in " ".join(document["notes"])


def test_every_option_of_every_command_says_what_it_does():
    import click

    from gpuemu_ci.cli.main import _register, cli

    _register()
    missing = []

    def walk(command: click.Command, path: str) -> None:
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk(sub, f"{path} {name}")
            return
        if not command.help:
            missing.append(path)
        missing.extend(
            f"{path} {p.opts}" for p in command.params if isinstance(p, click.Option) and not p.help
        )

    walk(cli, "gpuemu-ci")
    assert missing == []


@pytest.mark.slow
def test_a_run_removes_the_snapshots_an_earlier_run_left(tmp_path):
    stale = tmp_path / "snapshots" / "0123456789abcdef.npz"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"old")
    stale_map = stale.with_suffix(".png")  # an error map of the earlier run (issue #47)
    stale_map.write_bytes(b"old")
    code, _, _ = run(["--config", str(EXAMPLES / "buggy" / "gpuemu.toml"), "--out", str(tmp_path),
                      "--op", "softmax", "--iterations", "2"])  # fmt: skip
    assert code == 1
    document = json.loads((tmp_path / "results.json").read_text())
    named = {f[key] for op in document["ops"] for f in op["failures"] for key in ("snapshot", "error_map")}
    assert not stale.exists() and not stale_map.exists()
    assert {f"snapshots/{p.name}" for p in (tmp_path / "snapshots").iterdir()} == named


@pytest.mark.slow
def test_replay_from_a_snapshot_needs_no_op(tmp_path):
    config = EXAMPLES / "buggy" / "gpuemu.toml"
    run(["--config", str(config), "--out", str(tmp_path), "--op", "softmax", "--iterations", "2"])
    document = json.loads((tmp_path / "results.json").read_text())
    failure = document["ops"][0]["failures"][0]
    replayed = run_cli(["replay", "--config", str(config), "--snapshot", str(tmp_path / failure["snapshot"]),
                        "--out", str(tmp_path / "again")])  # fmt: skip
    assert replayed.code == 1 and "REPRODUCED softmax" in replayed.stderr
    assert "inputs: x(" in replayed.stderr


@pytest.mark.slow
def test_calibrate_says_when_a_percentile_tolerance_would_mean_nothing():
    result = run_cli(["calibrate", "--config", str(EXAMPLES / "quickstart" / "gpuemu.toml"), "--op", "matmul",
                      "--iterations", "8", "--percentile", "99.9", "--json"])  # fmt: skip
    rows = json.loads(result.stdout)
    useless = [row for row in rows if row["meaningless"]]
    assert useless, rows  # wide-range inputs make the absolute errors as large as the outputs
    assert "no meaningful atol/rtol" in result.stderr and "keep the error bound" in result.stderr
    assert all(row["meaningless"] is None or "atol" in row["meaningless"] or "rtol" in row["meaningless"]
               for row in rows)  # fmt: skip


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize(
    ("arch", "message"), [("sm_9999", "is not one this toolchain"), ("compute_80", "virtual")]
)
def test_a_bad_kernel_arch_is_found_before_any_op_runs(tmp_path, simple_project, arch, message):
    config = simple_project()
    kernel = tmp_path / "k.cu"
    kernel.write_text('extern "C" __global__ void k(float* y) { y[0] = 1.f; }\n')
    config.write_text(
        config.read_text() + f'\n[[kernels]]\nname = "k"\nsource = "{kernel}"\narchs = ["{arch}"]\n'
    )
    code, _, err = run(["--config", str(config), "--out", str(tmp_path / "out")])
    assert code == 2 and message in err
    assert "cases" not in err  # no op started
    assert not (tmp_path / "out" / "results.json").exists()


def test_a_launchable_kernel_is_named_like_an_op_and_its_replay_without_a_gpu_says_it_cannot_run(
    tmp_path, monkeypatch
):
    """A [[kernels]] entry with a launch table is validated like an op: `run --op` and the replay command of its
    failures name it. On a machine without a GPU its replay is refused (exit 3), never judged or `REPRODUCED`."""
    monkeypatch.setenv("GPUEMU_NO_GPU", "1")
    config = str(EXAMPLES / "cuda" / "gpuemu-buggy.toml")
    code, _, err = run(["--config", config, "--out", str(tmp_path), "--op", "gelu", "--no-lint"])
    assert code == 3, (
        err
    )  # selected (not "is not an op"), skipped visibly, and a run where nothing ran is no pass
    (op,) = json.loads((tmp_path / "results.json").read_text())["ops"]
    assert op["name"] == "gelu" and op["status"] == "skipped" and "no GPU" in (op["skip_reason"] or "")
    replayed = run_cli(
        ["replay", "--config", config, "--op", "gelu", "--seed", "7", "--out", str(tmp_path / "r")]
    )
    assert replayed.code == 3 and "REPRODUCED" not in replayed.stderr
    assert "runs on a GPU" in replayed.stderr and "has none" in replayed.stderr


@pytest.mark.slow
def test_the_replay_of_an_op_that_no_longer_loads_says_it_could_not_run(make_project, tmp_path):
    config = make_project(
        '[[ops]]\nname = "scale"\nop = "ops_mod:missing"\nreference = "ops_mod:ref"\nfamily = "elementwise"\n'
        'inputs = ["x"]\n',
        {"ops_mod.py": "def ref(x):\n    return x\n"},
    )
    replayed = run_cli(
        ["replay", "--config", str(config), "--op", "scale", "--seed", "7", "--out", str(tmp_path / "r")]
    )
    assert replayed.code == 3, replayed.stderr
    assert "COULD NOT RUN scale" in replayed.stderr and "REPRODUCED" not in replayed.stderr
