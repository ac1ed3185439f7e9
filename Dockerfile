# The image of gpuemu-ci's Docker action: the CUDA 12 toolchain (nvcc and ptxas for the PTX lint,
# cuobjdump and nvdisasm for SASS), Python 3.10 with CuPy for CUDA kernels when the runner exposes a
# GPU, and gpuemu-ci built from this directory. GitHub runs an action's container as root with the
# workspace as its working directory, so this image sets neither USER nor WORKDIR.
FROM nvidia/cuda:12.6.3-devel-ubuntu22.04

# The runner never passes --gpus to an action's container: a GPU is visible only on hosts whose Docker
# default runtime is NVIDIA's, and only when these variables ask that runtime to inject it.
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Versions come from the base image's Ubuntu release; exact apt pins break whenever Ubuntu ships a
# security update, so DL3008 (pin apt versions) is waived for these two packages.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-pip \
    && rm -rf /var/lib/apt/lists/*

# .dockerignore lets only the package sources, pyproject.toml, README.md and entrypoint.py through.
COPY . /action/

# The [cupy] extra pins cupy-cuda12x in pyproject.toml, the one place versions live. The tool checks
# make the build fail here, not in a user's job, if the base image ever drops one of them.
RUN python3 -m pip install --no-cache-dir "/action[cupy]" \
    && nvcc --version \
    && ptxas --version \
    && cuobjdump --version \
    && nvdisasm --version \
    && gpuemu-ci --version

ENTRYPOINT ["python3", "/action/entrypoint.py"]
