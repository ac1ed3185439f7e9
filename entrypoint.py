#!/usr/bin/env python3
"""Docker entry point of the gpuemu-ci Action. Thin on purpose: the logic is in gpuemu_ci.action."""

import sys

from gpuemu_ci.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["action"]))
