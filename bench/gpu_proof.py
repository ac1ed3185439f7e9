"""The GPU proof (issue #31): what bench/gpu_proof.sh runs on a machine with an NVIDIA GPU, one subcommand per
step, each writing `$OUT/steps/<step>.json`; `collect` joins them into `$OUT/gpu-proof.json`.

    preflight   nvidia-smi present and answering, a driver new enough for CUDA 12: device.json, the CUDA major
    pytest      `pytest -m gpu`: passes only if GPU-marked tests ran and none was skipped
    examples    examples/cuda (CuPy launches), examples/triton (compiled) and examples/torch (CUDA tensors,
                backward = true) on the device: each passes, each seeded bug fails and replays from its seed
    verdicts    the same Triton configs and seeds in Triton's interpreter (the GPU hidden) and compiled on the
                device: a verdict table, and for each case that differs a reason category
    lint        `gpuemu-ci lint` with the device's nvcc/ptxas against the NVRTC route: figures per kernel
    bench       wall time of the gate against the time inside op calls and inside reference calls (fp64 on the
                CPU and fp64 on the device)
    mutate      `gpuemu-ci mutate` on examples/cuda: on the device every CUDA mutant the lint cannot judge runs
                its cases through the kernel's launch (none is `not run`), and the kernel gets a score
    collect     gpu-proof.json: the device, every step, an overall verdict; checked against its schema

Everything that decides (parsing nvidia-smi, reading JUnit, comparing verdicts, comparing lint figures,
checking the document) is a plain function, tested on the CPU in tests/bench/test_gpu_proof.py.

    python bench/gpu_proof.py STEP --out DIR [options]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SCHEMA = "gpuemu-ci/gpu-proof/1"
# CUDA 12 needs driver >= 525.60.13 on Linux (CuPy's cupy-cuda12x and torch's cu12 wheels need CUDA 12).
MIN_DRIVER = (525, 60)
STEPS = ("pytest", "examples", "verdicts", "lint", "bench", "mutate")
STATUSES = frozenset({"passed", "failed", "error", "not_run"})
# Exit codes, as gpuemu-ci's: 0 proven, 1 a check failed, 2 usage error, 3 could not run (no GPU, no tool).
PASSED, FAILED, USAGE, INFRA = 0, 1, 2, 3

# The examples run on the device: (name, good config, buggy config, op the bug is in).
EXAMPLES = (
    ("cuda", "examples/cuda/gpuemu.toml", "examples/cuda/gpuemu-buggy.toml", "gelu"),
    ("triton", "examples/triton/gpuemu.toml", "examples/triton/gpuemu-buggy.toml", "rmsnorm"),
    ("torch", "examples/torch/gpuemu.toml", "examples/torch/gpuemu-buggy.toml", "swiglu"),
)
TRITON_CONFIGS = ("examples/triton/gpuemu.toml", "examples/triton/gpuemu-buggy.toml")
# Ops of those configs whose kernels read masked-off lanes without `other` (0 on the GPU, and under the layer):
# the verdicts must agree, and the CPU side must warn that Triton leaves those lanes undefined.
MASKED_LANE_OPS = frozenset({"rmsnorm_no_other"})
LINT_CONFIGS = ("examples/cuda/gpuemu.toml",)
MUTATE_CONFIG = "examples/cuda/gpuemu.toml"
LINT_FIGURES = ("registers", "stack_frame", "spill_stores", "spill_loads", "shared_memory", "local_memory")

# Why a CPU (interpreter) verdict and a GPU verdict of the same case may differ.
REASONS = (
    "TF32", "masked lanes", "fp16 arithmetic", "program order", "interpreter skip", "raised on one side",
    "unexplained",
)  # fmt: skip
# Differences that say the CPU verdict cannot be trusted (the step fails on them): the op raised on one side only
# (a harness or interpreter fault, not a numerical difference), or nothing explains it.
UNTRUSTED = frozenset({"raised on one side", "unexplained"})


class ProofError(Exception):
    """A check that cannot go on: the message is for the user, the code is the exit status."""

    def __init__(self, message: str, code: int = INFRA) -> None:
        super().__init__(message)
        self.code = code


def log(message: str) -> None:
    print(f"[gpu-proof {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---- preflight -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Device:
    name: str
    driver: str
    compute_capability: str
    memory_mib: int
    cuda: str  # the highest CUDA version the driver supports, from nvidia-smi's banner

    @property
    def cuda_major(self) -> int:
        return int(self.cuda.split(".")[0])


def parse_query(csv_line: str) -> tuple[str, str, str, int]:
    """One line of `nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total
    --format=csv,noheader,nounits`."""
    fields = [f.strip() for f in csv_line.split(",")]
    if len(fields) != 4:
        raise ProofError(f"nvidia-smi answered {csv_line!r}, not name, driver, compute capability, memory")
    name, driver, capability, memory = fields
    try:
        return name, driver, capability, int(float(memory))
    except ValueError as exc:
        raise ProofError(f"nvidia-smi reported memory {memory!r}, not a number of MiB") from exc


def parse_cuda_version(banner: str) -> str:
    """The `CUDA Version: 12.4` of nvidia-smi's banner."""
    found = re.search(r"CUDA Version:\s*(\d+\.\d+)", banner)
    if found is None:
        raise ProofError("nvidia-smi's banner names no CUDA version: is the driver loaded?")
    return found.group(1)


def driver_too_old(driver: str, minimum: tuple[int, int] = MIN_DRIVER) -> bool:
    parts = re.findall(r"\d+", driver)
    if not parts:
        raise ProofError(f"nvidia-smi reported driver version {driver!r}, which is not a version")
    return tuple(int(p) for p in parts[:2]) < minimum


def preflight(path_env: str | None = None) -> Device:
    """The first GPU, or ProofError (exit 3) saying what is missing."""
    smi = shutil.which("nvidia-smi", path=path_env if path_env is not None else os.environ.get("PATH"))
    if smi is None:
        raise ProofError(
            "nvidia-smi is not on PATH: this needs a machine with an NVIDIA GPU and its driver "
            "(nothing was installed or run)"
        )
    query = "--query-gpu=name,driver_version,compute_cap,memory.total"
    done = _run_quiet([smi, query, "--format=csv,noheader,nounits"], timeout=30)
    if done.returncode != 0 or not done.stdout.strip():
        raise ProofError(
            f"nvidia-smi failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()[:300]}"
        )
    name, driver, capability, memory = parse_query(done.stdout.strip().splitlines()[0])
    banner = _run_quiet([smi], timeout=30)
    cuda = parse_cuda_version(banner.stdout)
    if driver_too_old(driver):
        raise ProofError(
            f"driver {driver} on {name} is too old: CUDA 12 (CuPy's cupy-cuda12x, torch's CUDA wheels) needs "
            f">= {MIN_DRIVER[0]}.{MIN_DRIVER[1]}"
        )
    return Device(name, driver, capability, memory, cuda)


def _run_quiet(
    command: Sequence[str], timeout: float, env: Mapping[str, str] | None = None, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """Run a command with a time limit that also ends its children (gpuemu-ci's worker processes): it runs in a
    session of its own, and the whole process group is killed when the limit passes."""
    try:
        process = subprocess.Popen(
            list(command),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(env or os.environ),
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        return subprocess.CompletedProcess(list(command), 127, "", str(exc))
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        return subprocess.CompletedProcess(
            list(command), 124, stdout, stderr + f"\n(timed out after {timeout:.0f} s)"
        )
    return subprocess.CompletedProcess(list(command), process.returncode, stdout, stderr)


class Deadline:
    """A step's time limit, shared by its runs: each gets what is left (a hung run cannot outlive the step)."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return max(1.0, self.end - time.monotonic())


# ---- install: the locked part ----------------------------------------------------------------------------------

LOCK = REPO / "requirements" / "image.lock"
# What the Action's image pins for CuPy on CUDA 12 and for the lint's NVRTC route (NVIDIA's CUDA 13.5 wheels).
LOCKED_CUPY = {12: ("cupy-cuda12x", "cuda-pathfinder", "nvidia-cuda-nvrtc-cu12", "nvidia-cuda-runtime-cu12")}
LOCKED_LINT = (
    "nvidia-cuda-nvrtc",
    "nvidia-cuda-nvcc",
    "nvidia-cuda-crt",
    "nvidia-cuda-cccl",
    "nvidia-cuda-nvdisasm",
    "nvidia-cuda-runtime",
)


def lock_subset(lock_text: str, names: Sequence[str]) -> str:
    """The entries of a pip-compile lock for `names` (pins and hashes, for `pip install --require-hashes
    --no-deps`). Raises ProofError naming any package the lock does not pin."""
    wanted = {n.lower() for n in names}
    kept: list[str] = []
    found: set[str] = set()
    keep = False
    for line in lock_text.splitlines():
        if line and not line[0].isspace():
            name = line.split("==", 1)[0].strip().lower()
            keep = "==" in line and name in wanted
            if keep:
                found.add(name)
        if keep and not line.lstrip().startswith("#"):
            kept.append(line)
    missing = sorted(wanted - found)
    if missing:
        raise ProofError(f"{LOCK.name} pins no {', '.join(missing)}")
    return "\n".join(kept).rstrip(" \\") + "\n"


# ---- step 1: pytest -m gpu ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JunitCounts:
    tests: int
    failures: int
    errors: int
    skipped: int
    skip_messages: tuple[str, ...]


def read_junit(path: Path) -> JunitCounts:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise ProofError(f"cannot read the JUnit report {path}: {exc}") from exc
    tests = failures = errors = skipped = 0
    messages: list[str] = []
    for case in root.iter("testcase"):
        tests += 1
        failures += len(case.findall("failure"))
        errors += len(case.findall("error"))
        for skip in case.findall("skipped"):
            skipped += 1
            messages.append(f"{case.get('classname', '')}::{case.get('name', '')}: {skip.get('message', '')}")
    return JunitCounts(tests, failures, errors, skipped, tuple(messages))


def judge_pytest(counts: JunitCounts, exit_code: int) -> tuple[str, str]:
    """(status, why): GPU-marked tests must all run and pass; one skip is a failure of the proof."""
    if counts.tests == 0:
        return "failed", "no GPU-marked test was collected"
    if counts.skipped:
        return "failed", f"{counts.skipped} GPU-marked test(s) skipped on a GPU machine: " + "; ".join(
            counts.skip_messages[:5]
        )
    if counts.failures or counts.errors or exit_code != 0:
        return "failed", f"{counts.failures} failed, {counts.errors} errors (pytest exit {exit_code})"
    return "passed", f"{counts.tests} GPU-marked tests ran and passed"


def gpu_test_files(tests: Path) -> list[str]:
    """The test modules that mark tests `gpu` (`@pytest.mark.gpu` or a module-level `pytestmark`): collecting
    only these keeps the step within its budget, and `-m gpu` still selects the marked tests among them."""
    return sorted(
        str(path.relative_to(tests.parent))
        for path in tests.rglob("test_*.py")
        if re.search(r"mark\.gpu\b", path.read_text(encoding="utf-8", errors="replace"))
    )


def step_pytest(out: Path, timeout: float) -> dict[str, Any]:
    junit = out / "pytest-gpu.xml"
    files = gpu_test_files(REPO / "tests")
    if not files:
        return {"status": "failed", "why": "no test module marks a test `gpu`"}
    command = [
        sys.executable,
        "-m",
        "pytest",
        *files,
        "-m",
        "gpu",
        "-rs",
        "-q",
        f"--junitxml={junit}",
        "-p",
        "no:cacheprovider",
    ]
    done = _run_quiet(command, timeout=timeout, env=device_env())
    (out / "pytest-gpu.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    if not junit.is_file():
        return {"status": "error", "why": f"pytest wrote no JUnit report (exit {done.returncode})"}
    counts = read_junit(junit)
    status, why = judge_pytest(counts, done.returncode)
    return {
        "status": status,
        "why": why,
        "tests": counts.tests,
        "failures": counts.failures,
        "errors": counts.errors,
        "skipped": counts.skipped,
    }


# ---- step 2: the examples on the device ----------------------------------------------------------------------


def gpuemu_ci(
    args: Sequence[str], timeout: float, env: Mapping[str, str]
) -> subprocess.CompletedProcess[str]:
    return _run_quiet([sys.executable, "-m", "gpuemu_ci", *args], timeout=timeout, env=env)


def device_env(*, hide_gpu: bool = False) -> dict[str, str]:
    """This checkout's gpuemu-ci, Triton compiled (TRITON_INTERPRET unset) unless the GPU is hidden."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "GPUEMU_USER_CONFIG": "none"}
    env.pop("TRITON_INTERPRET", None)
    env.pop("GPUEMU_NO_GPU", None)
    if hide_gpu:
        # As on a CPU runner: gpuemu-ci's own switch (nvidia-smi ignores CUDA_VISIBLE_DEVICES, so that alone would
        # not hide the device from its detection), and no device for torch either. Triton then runs interpreted.
        env["GPUEMU_NO_GPU"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def check_example_run(results: Mapping[str, Any], *, expect_failure: bool, buggy_op: str) -> list[str]:
    """What is wrong with one example's results.json on the device (empty: as expected)."""
    problems = []
    if results.get("environment", {}).get("gpu") is None:
        problems.append("results.json records no GPU")
    for op in results.get("ops", []):
        if op.get("status") == "skipped":
            problems.append(f"{op['name']}: skipped ({op.get('skip_reason')}) on a GPU machine")
        if op.get("interpreter"):
            problems.append(f"{op['name']}: ran in {op['interpreter']}, not compiled")
    failed = sorted(op["name"] for op in results.get("ops", []) if op.get("status") != "passed")
    if expect_failure:
        if failed != [buggy_op]:
            problems.append(f"expected only {buggy_op} to fail, got {failed or 'none'}")
    elif failed:
        problems.append(f"expected every op to pass, got {failed} not passing")
    kernels_failed = [
        k["name"] for k in results.get("kernels", []) if k.get("status") not in ("passed", None)
    ]
    if kernels_failed:
        problems.append(f"lint of {kernels_failed} did not pass")
    return problems


def first_failure(results: Mapping[str, Any], op_name: str) -> Mapping[str, Any] | None:
    for op in results.get("ops", []):
        if op.get("name") == op_name and op.get("failures"):
            return dict(op["failures"][0])
    return None


def step_examples(out: Path, timeout: float) -> dict[str, Any]:
    env = device_env()
    deadline = Deadline(timeout)
    rows = []
    for name, good, buggy, op in EXAMPLES:
        row: dict[str, Any] = {"example": name}
        for label, config, expect in (("good", good, False), ("buggy", buggy, True)):
            where = out / "examples" / f"{name}-{label}"
            started = time.perf_counter()
            done = gpuemu_ci(
                ["run", "--config", config, "--require-gpu", "--out", str(where)], deadline.left(), env
            )
            row[f"{label}_exit"] = done.returncode
            row[f"{label}_wall_s"] = round(time.perf_counter() - started, 3)
            results = _load(where / "results.json")
            if results is None:
                row.setdefault("problems", []).append(f"{label}: no results.json (exit {done.returncode})")
                continue
            problems = check_example_run(results, expect_failure=expect, buggy_op=op)
            if done.returncode != (1 if expect else 0):
                problems.append(f"exit {done.returncode}, expected {1 if expect else 0}")
            row.setdefault("problems", []).extend(f"{label}: {p}" for p in problems)
            if expect:
                failure = first_failure(results, op)
                if failure is None:
                    continue
                row["seed"] = failure.get("case_seed")
                replay = shlex.split(str(failure.get("replay", "")))[1:]
                again = gpuemu_ci([*replay, "--out", str(where / "replay")], deadline.left(), env)
                row["replayed"] = again.returncode == 1 and "REPRODUCED" in again.stdout + again.stderr
                if not row["replayed"]:
                    row["problems"].append(
                        f"replay of seed {row['seed']} did not reproduce (exit {again.returncode})"
                    )
        row["status"] = "passed" if not row.get("problems") else "failed"
        rows.append(row)
        log(f"examples: {name}: {row['status']} {row.get('problems') or ''}")
    status = "passed" if all(r["status"] == "passed" for r in rows) else "failed"
    return {"status": status, "examples": rows}


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# ---- step 3: the CPU verdict against the GPU's -----------------------------------------------------------------


@dataclass(frozen=True)
class CaseVerdict:
    verdict: str  # passed | failed | errored | skipped
    kind: str = ""
    message: str = ""


def case_verdicts(results: Mapping[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (op, dtype): the counts, and the cases that did not pass (from `failures`), by case id."""
    table: dict[tuple[str, str], dict[str, Any]] = {}
    for op in results.get("ops", []):
        for row in op.get("dtypes", []):
            table[(op["name"], row["dtype"])] = {
                "total": row.get("cases_total", 0),
                "skipped": row.get("cases_skipped", 0),
                "skip_reason": row.get("skip_reason"),
                "cases": {},
                "complete": not op.get("failures_omitted"),
            }
        for failure in op.get("failures", []):
            entry = table.setdefault(
                (op["name"], failure["dtype"]),
                {"total": 0, "skipped": 0, "skip_reason": None, "cases": {}, "complete": True},
            )
            verdict = "errored" if failure.get("errored") else "failed"
            entry["cases"][failure["case_id"]] = CaseVerdict(
                verdict, failure.get("kind", ""), failure.get("message", "")
            )
    return table


def reason_for(dtype: str, cpu: CaseVerdict, gpu: CaseVerdict, *, uses_dot: bool) -> str:
    """The likeliest reason a case's CPU and GPU verdicts differ, from what each side reported."""
    text = f"{cpu.kind} {cpu.message} {gpu.kind} {gpu.message}".lower()
    if "skipped" in (cpu.verdict, gpu.verdict):
        return "interpreter skip"
    if _raised(cpu) != _raised(gpu):
        return "raised on one side"
    if any(w in text for w in ("nondetermin", "program order", "atomic", "race")):
        return "program order"
    if any(
        w in text for w in ("masked", "poison", "out of bounds", "out-of-bounds", "unwritten", "not written")
    ):
        return "masked lanes"
    if "tf32" in text or (uses_dot and dtype == "float32"):
        return "TF32"
    if dtype in ("float16", "bfloat16"):
        return "fp16 arithmetic"
    return "unexplained"


def _raised(verdict: CaseVerdict) -> bool:
    """The op raised instead of returning (the gate's message for it), or the case errored."""
    return verdict.verdict == "errored" or verdict.message.startswith("the op raised")


def compare_verdicts(
    cpu: Mapping[str, Any], gpu: Mapping[str, Any], *, dot_ops: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The verdict table of one config run on both sides with the same seed: per op and dtype, how many cases
    agree, and every case that differs with its reason. Raises ProofError when the two runs are not the same
    plan (other seed, other cases), which would make the comparison meaningless."""
    if cpu.get("seed") != gpu.get("seed"):
        raise ProofError(f"the CPU run used seed {cpu.get('seed')} and the GPU run {gpu.get('seed')}")
    left, right = case_verdicts(cpu), case_verdicts(gpu)
    rows = []
    differences = []
    for key in sorted(set(left) | set(right)):
        op, dtype = key
        a = left.get(key, {"total": 0, "skipped": 0, "cases": {}, "complete": True, "skip_reason": None})
        b = right.get(key, {"total": 0, "skipped": 0, "cases": {}, "complete": True, "skip_reason": None})
        if a["total"] and b["total"] and a["total"] != b["total"]:
            raise ProofError(
                f"{op} [{dtype}]: {a['total']} cases on the CPU, {b['total']} on the GPU: not one plan"
            )
        total = max(a["total"], b["total"])
        differ = 0
        for case_id in sorted(set(a["cases"]) | set(b["cases"])):
            va = a["cases"].get(
                case_id, CaseVerdict("skipped" if a["skipped"] == a["total"] and a["total"] else "passed")
            )
            vb = b["cases"].get(
                case_id, CaseVerdict("skipped" if b["skipped"] == b["total"] and b["total"] else "passed")
            )
            if va.verdict == vb.verdict:
                continue
            differ += 1
            differences.append(
                {
                    "op": op,
                    "dtype": dtype,
                    "case": case_id,
                    "cpu": va.verdict,
                    "gpu": vb.verdict,
                    "reason": reason_for(dtype, va, vb, uses_dot=op in dot_ops),
                    "cpu_message": va.message[:300],
                    "gpu_message": vb.message[:300],
                }
            )
        whole_skip = (a["skipped"] == a["total"] > 0) != (b["skipped"] == b["total"] > 0)
        if (
            whole_skip and not differ
        ):  # a dtype skipped on one side only (bf16 in the interpreter): every case
            differ = total
            differences.append(
                {
                    "op": op,
                    "dtype": dtype,
                    "case": "*",
                    "cpu": "skipped" if a["skipped"] else "ran",
                    "gpu": "skipped" if b["skipped"] else "ran",
                    "reason": "interpreter skip",
                    "cpu_message": str(a.get("skip_reason") or ""),
                    "gpu_message": str(b.get("skip_reason") or ""),
                }
            )
        rows.append(
            {
                "op": op,
                "dtype": dtype,
                "cases": total,
                "agree": total - differ,
                "differ": differ,
                "cpu_failed": len(a["cases"]),
                "gpu_failed": len(b["cases"]),
                "complete": a["complete"] and b["complete"],
            }
        )
    reasons = {r: sum(1 for d in differences if d["reason"] == r) for r in REASONS}
    cases = sum(r["cases"] for r in rows)
    agree = sum(r["agree"] for r in rows)
    return {
        "rows": rows,
        "differences": differences,
        "reasons": reasons,
        "cases": cases,
        "agree": agree,
        "agreement": round(agree / cases, 4) if cases else None,
    }


def ops_using_dot(config: str) -> frozenset[str]:
    """Ops of a config whose module source calls tl.dot (where TF32 can explain a float32 difference)."""
    found = set()
    text = (REPO / config).read_text(encoding="utf-8")
    root = (REPO / config).parent
    for name, target in re.findall(r'^name = "([^"]+)"\nop = "([\w.]+):\w+"', text, re.M):
        source = root / (target.replace(".", "/") + ".py")
        if source.is_file() and "tl.dot" in source.read_text(encoding="utf-8"):
            found.add(name)
    return frozenset(found)


def step_verdicts(out: Path, timeout: float) -> dict[str, Any]:
    deadline = Deadline(timeout)
    tables = []
    for config in TRITON_CONFIGS:
        runs = {}
        for side, hide in (("cpu", True), ("gpu", False)):
            where = out / "verdicts" / f"{Path(config).parent.name}-{Path(config).stem}-{side}"
            gpuemu_ci(
                ["run", "--config", config, "--out", str(where)], deadline.left(), device_env(hide_gpu=hide)
            )
            runs[side] = _load(where / "results.json")
        if runs["cpu"] is None or runs["gpu"] is None:
            tables.append({"config": config, "error": "a side wrote no results.json"})
            continue
        table = compare_verdicts(runs["cpu"], runs["gpu"], dot_ops=ops_using_dot(config))
        tables.append({"config": config, **sides_problems(runs["cpu"], runs["gpu"]), **table})
        log(f"verdicts: {config}: {table['agree']}/{table['cases']} cases agree; reasons {table['reasons']}")
    if any("error" in t for t in tables):
        return {"status": "error", "tables": tables}
    problems = [p for t in tables for p in t["problems"]]
    problems += [
        f"{t['config']}: {count} case(s) differ for a reason that is no numerical difference ({reason})"
        for t in tables
        for reason, count in t["reasons"].items()
        if reason in UNTRUSTED and count
    ]
    return {"status": "failed" if problems else "passed", "why": "; ".join(problems), "tables": tables}


def sides_problems(cpu: Mapping[str, Any], gpu: Mapping[str, Any]) -> dict[str, list[str]]:
    """A comparison means something only if the CPU side ran in the interpreter and the GPU side compiled."""
    problems = []
    for op in cpu.get("ops", []):
        if op.get("interpreter") != "triton-interpreter":
            problems.append(f"{op['name']}: the CPU side did not run in Triton's interpreter")
        warned = any("masked lanes without `other`" in note for note in op.get("triton_notes", []))
        if op["name"] in MASKED_LANE_OPS and not warned:
            problems.append(
                f"{op['name']}: the CPU side did not warn about masked lanes read without `other`"
            )
    if gpu.get("environment", {}).get("gpu") is None:
        problems.append("the GPU side found no GPU")
    for op in gpu.get("ops", []):
        if op.get("interpreter"):
            problems.append(f"{op['name']}: the GPU side ran in {op['interpreter']}, not compiled")
    return {"problems": problems}


# ---- step 4: lint figures, device ptxas against NVRTC ------------------------------------------------------------


def lint_figures(report: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """{"kernel/entry/arch": {figure: value}} of a `gpuemu-ci lint --json` report."""
    figures: dict[str, dict[str, int]] = {}
    for kernel in report.get("kernels", []):
        for entry in kernel.get("entries", []):
            key = f"{kernel['name']}/{entry['kernel']}/{entry['arch']}"
            figures[key] = {f: int(entry.get(f) or 0) for f in LINT_FIGURES}
    return figures


def compare_lint(nvcc: Mapping[str, Any], other: Mapping[str, Any]) -> dict[str, Any]:
    """The device nvcc's figures against another compile of the same sources: the device's NVRTC, or a
    report made on another machine (the CPU runner's nvcc or NVRTC route)."""
    a, b = lint_figures(nvcc), lint_figures(other)
    differences = [
        {"entry": key, "figure": f, "nvcc": a[key][f], "nvrtc": b[key][f]}
        for key in sorted(set(a) & set(b))
        for f in LINT_FIGURES
        if a[key][f] != b[key][f]
    ]
    missing = sorted(set(a) ^ set(b))
    return {
        "entries": len(set(a) & set(b)),
        "differences": differences,
        "only_one_side": missing,
        "toolchains": {
            "nvcc": nvcc.get("lint", {}).get("toolchain"),
            "other": other.get("lint", {}).get("toolchain"),
        },
        "equal": not differences and not missing,
        "same_release": _release(nvcc) is not None and _release(nvcc) == _release(other),
    }


def _release(report: Mapping[str, Any]) -> str | None:
    """major.minor of the compiler a lint report names (toolchain.nvcc, else toolchain.nvrtc)."""
    toolchain = report.get("lint", {}).get("toolchain") or {}
    version = str(toolchain.get("nvcc") or toolchain.get("nvrtc") or "")
    found = re.match(r"(\d+\.\d+)", version)
    return found.group(1) if found else None


def lint_status(configs: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """Equal figures pass; unequal figures from the same CUDA release fail; from different releases they are
    recorded without a verdict (NVRTC 12.x/13.0 and nvcc differ by design: see the config reference)."""
    if all(c["equal"] for c in configs):
        return (
            "passed",
            "the device's nvcc and every other compile report the same figures for every kernel and arch",
        )
    if any(not c["equal"] and c["same_release"] for c in configs):
        return "failed", "compilers of the same CUDA release report different figures"
    return "not_run", "the figures differ, but between different CUDA releases: no conclusion"


# Lint reports made on another machine (`GPUEMU_LINT_FRONTEND=nvcc|nvrtc gpuemu-ci lint --config C --json >
# DIR/lint-local-<frontend>.json` on the CPU runner), carried to the device: its nvcc is compared with them.
LINT_REFERENCES = "GPU_PROOF_LINT_REFERENCES"


def step_lint(out: Path, timeout: float) -> dict[str, Any]:
    results = []
    deadline = Deadline(timeout)
    skipped = []
    references = (
        sorted(Path(os.environ[LINT_REFERENCES]).glob("lint-*.json"))
        if os.environ.get(LINT_REFERENCES)
        else []
    )
    for config in LINT_CONFIGS:
        reports = {}
        for frontend in ("nvcc", "nvrtc"):
            env = {**device_env(), "GPUEMU_LINT_FRONTEND": frontend}
            done = gpuemu_ci(["lint", "--config", config, "--json"], deadline.left(), env)
            try:
                reports[frontend] = json.loads(done.stdout)
            except ValueError:
                skipped.append(
                    f"device {frontend}: no report (exit {done.returncode}): {done.stderr.strip()[-200:]}"
                )
        device = reports.get("nvcc")
        toolchain = (device or {}).get("lint", {}).get("toolchain") or {}
        if device is None or toolchain.get("nvrtc") or not toolchain.get("nvcc"):
            return {"status": "not_run", "why": f"no nvcc on this machine ({toolchain or skipped})"}
        others = [("device NVRTC", reports["nvrtc"])] if "nvrtc" in reports else []
        others += [(f"{path.name}, made on another machine", _load(path) or {}) for path in references]
        for label, other in others:
            results.append({"config": config, "against": label, **compare_lint(device, other)})
    if not results:
        return {
            "status": "not_run",
            "why": "nothing to compare the device's nvcc with: " + "; ".join(skipped),
        }
    status, why = lint_status(results)
    return {"status": status, "why": why, "configs": results, "not_compared": skipped}


# ---- step 5: benchmark -----------------------------------------------------------------------------------------


def step_bench(out: Path, timeout: float) -> dict[str, Any]:
    """Wall time of the gate against the seconds inside op calls and reference calls on the same cases."""
    from gpu_proof_timing import time_example  # imports torch: only on the device (bench/ is on sys.path)

    deadline = Deadline(timeout)
    rows = []
    # The examples step's passing runs of the same configs give the gate's wall time (with Triton's compiles
    # cached on disk for the timing below); without them the gate runs here.
    examples = {
        row["example"]: row for row in (_load(out / "steps" / "examples.json") or {}).get("examples", [])
    }
    for name, config in (("torch", "examples/torch/gpuemu.toml"), ("triton", "examples/triton/gpuemu.toml")):
        earlier = examples.get(name, {})
        wall = earlier.get("good_wall_s") if earlier.get("good_exit") == 0 else None
        where = out / "examples" / f"{name}-good"
        if wall is None:
            started = time.perf_counter()
            where = out / "bench" / name
            done = gpuemu_ci(
                ["run", "--config", config, "--require-gpu", "--out", str(where)],
                deadline.left(),
                device_env(),
            )
            wall = time.perf_counter() - started
            if done.returncode != 0:
                return {
                    "status": "failed",
                    "why": f"the gate on {config} exited {done.returncode}",
                    "rows": rows,
                }
        row = bench_row(time_example(REPO / config), float(wall))
        rows.append({"example": name, **row, "gate_split_s": gate_split(where / "results.json")})
    return {"status": "passed", "rows": rows}


def gate_split(results_path: Path) -> dict[str, float] | None:
    """Where the gate's own seconds went on the device (results.json's per-op `timings`, summed over the ops:
    worker start-up, imports, CUDA and Triton preparation inside the op's calls, generation, judging): what
    wall_over_calls is made of. None when the document has no split (an older gpuemu-ci)."""
    from gpuemu_ci.results.timings import OpTimings, summed

    document = _load(results_path)
    if document is None:
        return None
    split = summed(OpTimings(**op["timings"]) for op in document.get("ops", []) if op.get("timings"))
    return None if split is None else {phase: round(s, 3) for phase, s in split.seconds().items()}


def bench_row(timing: Mapping[str, Any], gate_wall_s: float) -> dict[str, Any]:
    """One example's figures: which fp64 reference is faster, and the gate's wall time over the time inside the
    calls it makes (op, and the reference on the CPU where the judge runs it): near 1, the harness is not the
    bottleneck; far above, it is (worker start-up, Triton compiles, input generation, judging)."""
    device, cpu = timing["reference_device_s"], timing["reference_cpu_s"]
    calls = timing["op_s"] + cpu
    return {
        **timing,
        "gate_wall_s": round(gate_wall_s, 3),
        "wall_over_calls": round(gate_wall_s / calls, 2) if calls > 0 else None,
        "faster_reference": "device" if device < cpu else "cpu",
    }


# ---- step 7: gpuemu-ci mutate on the CUDA example ------------------------------------------------------------


def check_mutate(results: Mapping[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """What is wrong with `gpuemu-ci mutate`'s results.json on the device (empty: as expected), and its figures:
    on a GPU no CUDA mutant may be left `not run` for want of one, and the suite must kill some."""
    problems = []
    if results.get("environment", {}).get("gpu") is None:
        problems.append("results.json records no GPU")
    ops = (results.get("mutation") or {}).get("ops") or []
    if not ops:
        problems.append("results.json has no mutation part")
    figures: dict[str, Any] = {}
    for op in ops:
        name = op.get("op")
        counts = {k: op.get(k) for k in ("killed", "survived", "equivalent", "errored", "not_run", "score")}
        figures[str(name)] = {
            **counts,
            "survivors": [f"#{m['number']} {m['operator']}: {m['after']}" for m in op.get("mutants", [])
                          if m.get("status") == "survived"],
        }  # fmt: skip
        if not op.get("scored"):
            problems.append(f"{name}: not scored ({op.get('message')})")
        if op.get("lint_only_because"):
            problems.append(f"{name}: lint only on a GPU machine ({op['lint_only_because']})")
        if op.get("not_run"):
            problems.append(f"{name}: {op['not_run']} mutant(s) not run")
        if not op.get("killed"):
            problems.append(f"{name}: no mutant was killed")
    return problems, figures


def step_mutate(out: Path, timeout: float) -> dict[str, Any]:
    where = out / "mutate"
    budget = max(1.0, timeout - 10)  # mutate writes its document before the step's own limit
    done = gpuemu_ci(
        ["mutate", "--config", MUTATE_CONFIG, "--no-cache", "--budget", f"{budget:g}", "--out", str(where)],
        timeout,
        device_env(),
    )
    results = _load(where / "results.json")
    if results is None:
        return {"status": "failed", "why": f"no results.json (exit {done.returncode})"}
    problems, figures = check_mutate(results)
    if done.returncode != 0:
        problems.append(f"exit {done.returncode}, expected 0")
    status = "passed" if not problems else "failed"
    return {"status": status, "why": "; ".join(problems), "exit": done.returncode, "ops": figures}


# ---- collect ---------------------------------------------------------------------------------------------------


def validate_document(doc: Mapping[str, Any]) -> list[str]:
    """Schema problems of a gpu-proof.json (empty: valid)."""
    problems = []
    if doc.get("schema") != SCHEMA:
        problems.append(f"schema is {doc.get('schema')!r}, not {SCHEMA!r}")
    if doc.get("verdict") not in ("proven", "failed", "incomplete"):
        problems.append(f"verdict {doc.get('verdict')!r} is not proven, failed or incomplete")
    device = doc.get("device")
    if not isinstance(device, dict) or not {"name", "driver", "cuda", "compute_capability"} <= set(device):
        problems.append("device lacks name, driver, cuda or compute_capability")
    steps = doc.get("steps")
    if not isinstance(steps, dict) or set(steps) != set(STEPS):
        problems.append(f"steps must be exactly {list(STEPS)}")
    else:
        for name, step in steps.items():
            if not isinstance(step, dict) or step.get("status") not in STATUSES:
                problems.append(f"steps.{name}.status must be one of {sorted(STATUSES)}")
    return problems


def collect(out: Path) -> dict[str, Any]:
    device = _load(out / "device.json")
    if device is None:
        raise ProofError(f"{out / 'device.json'} is missing: run `preflight` first")
    steps = {}
    for name in STEPS:
        found = _load(out / "steps" / f"{name}.json")
        steps[name] = found if found is not None else {"status": "not_run", "why": "the step wrote no result"}
    statuses = {s["status"] for s in steps.values()}
    verdict = (
        "proven" if statuses == {"passed"} else "failed" if statuses & {"failed", "error"} else "incomplete"
    )
    doc = {
        "schema": SCHEMA,
        "verdict": verdict,
        "device": device,
        "steps": steps,
        "collected_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    problems = validate_document(doc)
    if problems:
        raise ProofError("gpu-proof.json would not be valid: " + "; ".join(problems))
    return doc


# ---- command line ----------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_proof.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("preflight", "locked", *STEPS, "collect"))
    parser.add_argument("--cuda-major", type=int, default=None, help="locked: the driver's CUDA major")
    parser.add_argument("--lint-wheels", action="store_true", help="locked: add the NVRTC route's wheels")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "gpu-proof-out"))
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds this step may take in all")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    if args.timeout <= 0:
        print("gpu_proof.py: --timeout must be positive", file=sys.stderr)
        return USAGE
    out: Path = args.out
    try:
        out.mkdir(parents=True, exist_ok=True)
        if args.step == "preflight":
            device = preflight()
            record = {
                "name": device.name,
                "driver": device.driver,
                "compute_capability": device.compute_capability,
                "memory_mib": device.memory_mib,
                "cuda": device.cuda,
                "cuda_major": device.cuda_major,
            }
            (out / "device.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
            log(
                f"device: {device.name}, driver {device.driver}, CUDA {device.cuda}, sm {device.compute_capability}"
            )
            print(device.cuda_major)
            return PASSED
        if args.step == "locked":
            names = [*LOCKED_CUPY.get(args.cuda_major or 0, ()), *(LOCKED_LINT if args.lint_wheels else ())]
            target = out / "gpu-proof-locked.txt"
            target.write_text(
                lock_subset(LOCK.read_text(encoding="utf-8"), names) if names else "", encoding="utf-8"
            )
            print(target if names else "")
            return PASSED
        if args.step == "collect":
            doc = collect(out)
            (out / "gpu-proof.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
            log(
                f"gpu-proof.json: {doc['verdict']} ("
                + ", ".join(f"{k} {v['status']}" for k, v in doc["steps"].items())
                + ")"
            )
            return PASSED if doc["verdict"] == "proven" else FAILED
        runner = {
            "pytest": step_pytest,
            "examples": step_examples,
            "verdicts": step_verdicts,
            "lint": step_lint,
            "bench": step_bench,
            "mutate": step_mutate,
        }[args.step]
        started = time.perf_counter()
        try:
            result = runner(out, args.timeout)
        except ProofError:
            raise
        except Exception as exc:  # a step that breaks is recorded as such; the next steps still run
            result = {"status": "error", "why": f"{type(exc).__name__}: {exc}"}
        result["seconds"] = round(time.perf_counter() - started, 3)
        (out / "steps").mkdir(exist_ok=True)
        (out / "steps" / f"{args.step}.json").write_text(
            json.dumps(result, indent=2) + "\n", encoding="utf-8"
        )
        log(f"{args.step}: {result['status']} in {result['seconds']} s {result.get('why', '')}")
        return PASSED if result["status"] == "passed" else FAILED
    except ProofError as exc:
        print(f"gpu_proof.py: {args.step}: {exc}", file=sys.stderr)
        return exc.code
    except OSError as exc:
        print(f"gpu_proof.py: {args.step}: {exc}", file=sys.stderr)
        return INFRA


if __name__ == "__main__":
    sys.exit(main())
