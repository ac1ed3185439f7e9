"""Writes the documentation pages that must not drift from the code: the `gpuemu.toml` key reference (from
config/keys.py and the model's defaults) and the Action's inputs and outputs (from action.yml)."""
