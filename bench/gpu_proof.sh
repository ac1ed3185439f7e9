#!/usr/bin/env bash
# The GPU proof (issue #31), in one command, on a machine with an NVIDIA GPU and this checkout:
#
#     bash bench/gpu_proof.sh                 # results in ./gpu-proof-out (or $OUT)
#
# Fails early and loudly without a usable GPU (nvidia-smi missing or failing, driver older than CUDA 12 needs),
# installs what is missing (CuPy for the CUDA major the driver reports, and NVIDIA's NVRTC wheels for the lint,
# at the versions and hashes requirements/image.lock pins where it pins them; torch with CUDA; Triton), then runs
# six steps, each under its own time limit so the whole stays under 9 minutes, and writes $OUT/gpu-proof.json
# plus $OUT/gpu-proof.log:
#   1. pytest -m gpu                 every GPU-marked test must run: a skip fails the step
#   2. examples on the device        examples/cuda through CuPy, examples/triton compiled, examples/torch on
#                                    CUDA tensors (backward = true); each seeded bug caught and replayed
#   3. CPU verdict vs GPU verdict    the Triton example configs under the interpreter (GPU hidden) and compiled:
#                                    float32, float16 and bfloat16 cases, and a kernel that reads masked lanes
#                                    without `other` (the verdicts must agree; the CPU side must warn about it)
#   4. lint                          the device's nvcc/ptxas against the NVRTC route there, and against the
#                                    reports in $GPU_PROOF_LINT_REFERENCES made elsewhere (lint-<frontend>.json)
#   5. benchmark                     gate wall time vs time in op calls vs reference calls (CPU and device),
#                                    and the gate's own split of its time (results.json timings, per phase)
#   6. mutate                        gpuemu-ci mutate on examples/cuda: the CUDA mutants the lint cannot judge
#                                    run their cases through the kernel's launch (none left `not run`)
# A step that fails is recorded and the next one still runs; the exit status is 0 only when every step passed.
#
# Offline machines (no package index): set GPU_PROOF_WHEELS to a directory of wheels made elsewhere with
# `pip download --no-deps ... -d DIR` for what the machine lacks (on an image that has torch, Triton and CuPy:
# msgspec, cryptography, cffi, pycparser, rfc8785, jsonschema and its three dependencies, setuptools). Every wheel
# there is installed without an index, then this checkout with --no-deps; the locked lint wheels only if the
# directory holds them. Packages that already import and see the GPU are not reinstalled.
set -euo pipefail

cd "$(dirname "$0")/.."
OUT="${OUT:-./gpu-proof-out}"
PYTHON="${PYTHON:-python3}"
export OUT
mkdir -p "$OUT/steps"
exec > >(tee -a "$OUT/gpu-proof.log") 2>&1

say() { printf '[gpu-proof %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { say "FAILED: $*"; exit 3; }

command -v timeout >/dev/null || die "coreutils' timeout is not on PATH"
command -v "$PYTHON" >/dev/null || die "$PYTHON is not on PATH (set PYTHON=...)"

say "0/7 preflight: nvidia-smi, driver, CUDA version"
cuda_major="$(timeout 30 "$PYTHON" bench/gpu_proof.py preflight --out "$OUT")" \
  || die "no usable GPU (see the message above); nothing was installed or run"
say "driver supports CUDA ${cuda_major}.x"

say "1/7 install: what is missing of gpuemu-ci's test extras, CuPy, the NVRTC lint wheels, torch with CUDA, Triton"
pip_args=(-m pip install --disable-pip-version-check --quiet)
if [[ -n "${GPU_PROOF_WHEELS:-}" ]]; then
  pip_args+=(--no-index --find-links "$GPU_PROOF_WHEELS")
fi
# Pinned with hashes from requirements/image.lock where it pins them (CuPy for CUDA 12, NVIDIA's 13.5 NVRTC route).
locked_args=()
"$PYTHON" -c "import cupy; cupy.cuda.runtime.getDeviceCount()" 2>/dev/null || locked_args+=(--cuda-major "$cuda_major")
PYTHONPATH=. "$PYTHON" -c "
import os, sys
from gpuemu_ci.lint.toolchain import discover_toolchain
sys.exit(discover_toolchain({**os.environ, 'GPUEMU_LINT_FRONTEND': 'nvrtc'}).frontend != 'nvrtc')" 2>/dev/null \
  || locked_args+=(--lint-wheels)
if (( ${#locked_args[@]} )); then
  locked="$("$PYTHON" bench/gpu_proof.py locked --out "$OUT" "${locked_args[@]}")" || die "cannot read requirements/image.lock"
  if [[ -n "$locked" ]]; then
    say "installing from the lock: $(grep -o '^[a-z0-9_-]*==[^ ]*' "$locked" | tr '\n' ' ')"
    if ! timeout 50 "$PYTHON" "${pip_args[@]}" --no-deps --require-hashes -r "$locked"; then
      # Offline, a lock entry missing from the wheel directory only costs the NVRTC side of the lint comparison
      # (that step then says not_run); CuPy is checked again below and is fatal there.
      [[ -n "${GPU_PROOF_WHEELS:-}" ]] || die "could not install $locked"
      say "the locked wheels are not all in $GPU_PROOF_WHEELS: going on without them"
    fi
  fi
fi
project_imports="import gpuemu_ci, pytest, msgspec, ml_dtypes, cryptography, rfc8785, jsonschema"
if [[ -n "${GPU_PROOF_WHEELS:-}" ]] && ! "$PYTHON" -c "$project_imports" 2>/dev/null; then
  wheels=("$GPU_PROOF_WHEELS"/*.whl)
  [[ -e "${wheels[0]}" ]] || die "GPU_PROOF_WHEELS=$GPU_PROOF_WHEELS holds no wheel"
  say "installing ${#wheels[@]} wheels from $GPU_PROOF_WHEELS, then this checkout without its dependencies"
  timeout 50 "$PYTHON" "${pip_args[@]}" --no-deps "${wheels[@]}" || die "could not install the wheels"
  timeout 50 "$PYTHON" "${pip_args[@]}" --no-deps --no-build-isolation -e . || die "could not install this checkout"
fi
missing=()
# the project's own dependencies and the test extras the test suite's conftest imports
"$PYTHON" -c "$project_imports" 2>/dev/null || missing+=(-e ".[test]")
# CUDA majors the lock does not pin CuPy for (13 and later): CuPy's own wheel for that major.
"$PYTHON" -c "import cupy" 2>/dev/null || missing+=("cupy-cuda${cuda_major}x")
# PyPI's Linux torch wheels are the CUDA builds (not the CPU index the CPU runners use).
"$PYTHON" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null || missing+=(torch)
"$PYTHON" -c "import triton" 2>/dev/null || missing+=(triton)
if (( ${#missing[@]} )); then
  say "installing: ${missing[*]}"
  timeout 50 "$PYTHON" "${pip_args[@]}" "${missing[@]}" || die "could not install ${missing[*]}"
fi
"$PYTHON" -c "import torch, cupy; assert torch.cuda.is_available(), 'torch sees no GPU'; print('torch', torch.__version__, 'CUDA', torch.version.cuda, '| cupy', cupy.__version__)" \
  || die "torch or CuPy cannot use the GPU"

# Step budgets in seconds: 390 for the steps (+5 each to stop), 30 for preflight, 100 for installing: < 9 min.
# GPU_PROOF_STEPS="pytest examples" runs only those (a rerun of what failed); the others are then not_run.
run_step() {
  local name="$1" budget="$2" number="$3"
  if [[ -n "${GPU_PROOF_STEPS:-}" && " ${GPU_PROOF_STEPS} " != *" ${name} "* ]]; then
    say "${number}/7 ${name}: not in GPU_PROOF_STEPS, skipped"
    return
  fi
  say "${number}/7 ${name} (at most ${budget} s)"
  if timeout --kill-after=5 "$((budget + 5))" "$PYTHON" bench/gpu_proof.py "$name" --out "$OUT" --timeout "$budget"; then
    say "${name}: passed"
  else
    say "${name}: did not pass (exit $?), going on"
  fi
}
run_step pytest 45 2
run_step examples 140 3
run_step verdicts 70 4
run_step lint 15 5
run_step bench 60 6
run_step mutate 60 7

status=0
"$PYTHON" bench/gpu_proof.py collect --out "$OUT" || status=$?
say "done: $OUT/gpu-proof.json ($( [[ $status -eq 0 ]] && echo proven || echo "not proven, exit $status" ))"
exit "$status"
