"""The GitHub Action: the run's identity from ``GITHUB_*``/``INPUT_*`` (`context`), the action.yml inputs
(`inputs`), workflow commands and the runner's output files (`commands`), and one module per mode."""
