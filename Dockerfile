# The image of gpuemu-ci's Docker action: Python 3.12 (Debian slim), gpuemu-ci's dependencies exactly as
# requirements/image.lock pins them (versions and sha256 hashes), and gpuemu-ci built from this directory.
# CUDA comes from NVIDIA's PyPI wheels, not the multi-gigabyte CUDA development image: NVRTC and the ptxas of
# its release lint .cu kernels (gpuemu_ci/lint/nvrtc.py; nvcc's own numbers, tested), nvdisasm (cuobjdump as a
# second) reads SASS for SASS patterns and counts,
# and CuPy for CUDA 12 launches kernels on a runner that exposes a GPU. GitHub runs an action's container as
# root with the workspace as its working directory, so this image sets neither USER nor WORKDIR: the Action
# runs the code under test unprivileged itself (gpuemu_ci/action/sandbox.py).
#
# The base is a moving tag of the official image; a release pins the image it builds by digest (the
# release workflow records it and action.yml's `docker://` form uses it), which is what makes a job's image
# reproducible.
FROM python:3.12-slim-bookworm

# The runner never passes --gpus to an action's container: a GPU is visible only on hosts whose Docker
# default runtime is NVIDIA's, and only when these variables ask that runtime to inject it.
# PYTHONDONTWRITEBYTECODE stops Python writing byte code at run time only (a job's processes would write it
# into a throwaway container); the image's byte code is compiled at build time, on purpose (below).
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore

# Dependencies first (a layer that changes only with the lock), installed without resolution: exactly the
# pinned files, each checked against its hash. nvidia-cuda-nvcc brings nvcc itself, which cannot run here
# (no cicc, no host compiler): only its ptxas is kept, with nvdisasm, cuobjdump, the headers and the shared
# libraries.
# The ".alt" copies of NVRTC for CUDA 12 are an alternative build CuPy does not load.
COPY requirements/image.lock /action/requirements/image.lock
RUN python -m pip install --no-deps --require-hashes -r /action/requirements/image.lock \
    && cu13="$(python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/nvidia" \
    && for tool in nvcc nvcc.profile nvlink cudafe++ fatbinary bin2c __nvcc_device_query crt; do \
         rm -rf "$cu13/cu13/bin/$tool"; done \
    && rm -f "$cu13"/cu13/lib/*_static.a "$cu13"/cu13/lib/libcudadevrt.a "$cu13"/cuda_nvrtc/lib/*.alt.so.* \
    && "$cu13/cu13/bin/ptxas" --version && "$cu13/cu13/bin/nvdisasm" --version \
    && "$cu13/cu13/bin/cuobjdump" --version

# .dockerignore lets only the package sources, pyproject.toml, README.md, entrypoint.py and the locks through.
COPY . /action/

# gpuemu-ci itself, with the build backend the lock pinned (no build isolation: nothing is fetched here).
# What the build leaves in /action goes, and so does the source copy: the entrypoint's directory comes first
# on sys.path, so with gpuemu_ci/ still there every job would import that uncompiled copy, not the installed
# package. Byte code on purpose: pip compiles what it installs, and the standard library (which the base
# image ships without byte code) is compiled here; every process of a job (the entrypoint, each worker)
# imports numpy, httpx, cryptography and jinja2, and compiled it starts in about half the time
# (bench/bench_image_startup.py). The checks make the build fail here, not in a user's job, if the lint
# toolchain is not usable.
RUN python -m pip install --no-deps --no-build-isolation /action \
    && rm -rf /action/build /action/gpuemu_ci.egg-info /action/gpuemu_ci /action/templates \
    && python -m compileall -q -j0 -x '/(site-packages|test|tests|idle_test)/' \
       "$(python -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')" \
    && gpuemu-ci --version \
    && python -c "from gpuemu_ci.lint.toolchain import discover_toolchain as d; t = d(); \
assert t.frontend == 'nvrtc' and t.ptxas and t.nvdisasm and t.cuobjdump, t; print('lint: NVRTC', t.nvrtc_version, 'ptxas', t.ptxas_version)"

# Opt-in, `docker build --build-arg GPUEMU_HIP=1`: the toolchain of the HIP lint (HIP kernels for AMD GPUs),
# Debian's clang 15 with its AMDGPU backend, lld and llvm-objdump/llvm-readelf, the ROCm device libraries and
# the HIP headers (gpuemu_ci/lint/hip_toolchain.py). It makes the image 0.62 GB larger (1.05 -> 1.66 GB, measured
# by .ci/container, which builds and tests both; docs/hip.md), so the default image goes without it and a HIP
# kernel there is linted `unavailable` (exit 3). Last, so that both images share every layer above.
ARG GPUEMU_HIP=""
RUN if [ -n "$GPUEMU_HIP" ]; then \
      apt-get update \
      && apt-get install -y --no-install-recommends clang-15=1:15.0.6-4+b1 lld-15=1:15.0.6-4+b1 \
         llvm-15=1:15.0.6-4+b1 rocm-device-libs=5.2.3-2 libamdhip64-dev=5.2.3-8 \
      && apt-get clean && rm -rf /var/lib/apt/lists/* \
      && python -c "from gpuemu_ci.lint.hip_toolchain import discover_hip_toolchain as d; t = d(); \
assert not t.missing and 'gfx90a' in t.supported_archs, t; print('HIP lint: clang', t.clang_version, 'HIP', t.hip_version)"; \
    fi

ENTRYPOINT ["python3", "/action/entrypoint.py"]
