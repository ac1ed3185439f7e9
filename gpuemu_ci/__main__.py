from gpuemu_ci import early_signals

early_signals.install()  # before the CLI's imports, which take a second or more

from gpuemu_ci.launch import keep_working_directory_off_path  # noqa: E402

keep_working_directory_off_path()  # `python -m` put it first: nothing in the workspace stands in for the tool

from gpuemu_ci.cli.main import main  # noqa: E402

raise SystemExit(main())
