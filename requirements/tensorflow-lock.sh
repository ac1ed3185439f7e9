#!/usr/bin/env bash
# Regenerate tensorflow.lock: tensorflow-cpu and what it needs, with sha256 hashes, constrained by dev.lock (so
# installing both keeps dev.lock's versions: numpy, ml_dtypes and the rest stay as locked). Same resolver and
# rules as dev-lock.sh (PyPI only, every supported Python); run it after dev-lock.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_CONFIG_FILE=/dev/null UV_NO_CONFIG=1
unset UV_INDEX_URL UV_EXTRA_INDEX_URL UV_FIND_LINKS UV_INDEX UV_DEFAULT_INDEX PIP_FIND_LINKS PIP_INDEX_URL \
  PIP_EXTRA_INDEX_URL PIP_CONSTRAINT
uv pip compile --quiet --no-config --default-index https://pypi.org/simple --universal --python-version 3.11 \
  --generate-hashes --no-emit-index-url --no-emit-find-links \
  --custom-compile-command requirements/tensorflow-lock.sh \
  -c requirements/dev.lock requirements/tensorflow.in --output-file requirements/tensorflow.lock
