"""The GitHub Action (entrypoint.py -> `gpuemu-ci action`): the action.yml inputs (`inputs`), workflow commands
and the runner's output files (`commands`), what every mode publishes (`publish`), and one module per mode:
`gate`, `baseline`, `nightly`, `sign`, `comment`. The run's identity comes from `github.context`."""
