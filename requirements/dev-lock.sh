#!/usr/bin/env bash
# Regenerate dev.lock (and tensorflow.lock, below): the exact versions and sha256 hashes of everything .ci/run installs besides torch (the
# project's dependencies, its `test` extra, and dev.in), resolved once for every supported Python (3.11 to
# 3.13, linux x86_64 and the rest) by uv's universal resolver: `pip install --require-hashes -r dev.lock` then
# picks each Python's versions by their markers. uv is on PyPI (`pip install uv`).
#
# Only PyPI is asked, whatever the machine's pip or uv configuration says (no config files, no --find-links),
# so the lock names no local index or path (tests/packaging/test_locks.py checks every lock for that).
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_CONFIG_FILE=/dev/null UV_NO_CONFIG=1
unset UV_INDEX_URL UV_EXTRA_INDEX_URL UV_FIND_LINKS UV_INDEX UV_DEFAULT_INDEX PIP_FIND_LINKS PIP_INDEX_URL \
  PIP_EXTRA_INDEX_URL PIP_CONSTRAINT
uv pip compile --quiet --no-config --default-index https://pypi.org/simple --universal --python-version 3.11 \
  --generate-hashes --no-emit-index-url --no-emit-find-links --extra test \
  --custom-compile-command requirements/dev-lock.sh \
  pyproject.toml requirements/dev.in --output-file requirements/dev.lock
# TensorFlow's CPU build for the TensorFlow backend's tests, in its own lock (.ci/run installs it after
# dev.lock), constrained by dev.lock so that installing both moves nothing dev.lock pins.
uv pip compile --quiet --no-config --default-index https://pypi.org/simple --universal --python-version 3.11 \
  --generate-hashes --no-emit-index-url --no-emit-find-links \
  --custom-compile-command requirements/dev-lock.sh \
  -c requirements/dev.lock requirements/tensorflow.in --output-file requirements/tensorflow.lock
