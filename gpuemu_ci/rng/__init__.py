"""Deterministic random numbers, bit-identical to gpuemu's published generator: the generator and seed
derivation (`xorshift`) and the GF(2) jump-ahead that vectorises it (`jump`)."""

from gpuemu_ci.rng.xorshift import SeededRng, derive_seed, splitmix64

__all__ = ["SeededRng", "derive_seed", "splitmix64"]
