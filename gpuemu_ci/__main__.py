from gpuemu_ci import early_signals

early_signals.install()  # before the CLI's imports, which take a second or more

from gpuemu_ci.cli.main import main  # noqa: E402

raise SystemExit(main())
