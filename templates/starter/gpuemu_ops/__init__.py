"""Ops registered in gpuemu.toml: the code under test and its fp64 references."""
