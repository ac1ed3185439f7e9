#!/usr/bin/env python3
"""Docker entry point of the gpuemu-ci Action. Thin on purpose: the logic is in gpuemu_ci.action."""

import sys

from gpuemu_ci import early_signals

early_signals.install()  # the runner may cancel the step while the CLI is still importing

from gpuemu_ci.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["action"]))
