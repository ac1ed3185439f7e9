"""The `gpuemu-ci` command line: one module per command (listed in `commands`), registered by `main`, which is
also the one place where errors become messages and exit codes. Commands parse options and call the layers
below; the work itself lives there, shared with the Action and `gpuemu_ci.check`."""
