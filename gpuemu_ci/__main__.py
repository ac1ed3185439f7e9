from gpuemu_ci.cli.main import main

raise SystemExit(main())
