"""The pipeline: config -> plan -> fuzz -> backends -> oracle -> lint -> results document.

- `gate.run_gate(config, options, baseline=...)`: the one gate, behind `gpuemu-ci run` and the Action.
- `session.Session`: owns the worker pool and the resolved `settings.Settings`; run, replay, minimize,
  calibrate and `gpuemu_ci.check` run cases through it.
- `op_runner`: one op's cases through the pool and the oracle; `records`: failure records and snapshots.
- `verdict.decide`: verdict and exit code, in one place.
- `replay`, `minimize`, `calibrate`: re-running, shrinking and measuring cases.
"""
