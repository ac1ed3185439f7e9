"""The fuzzer: a case's seed -> everything the op receives, byte for byte the same on every machine.

- `inputs`: `case_inputs`, the one way a case's inputs are made (from its seed, or from the snapshot that
  pins it), used by both workers and through them by replay, minimize, shadow and the corpus; `digest`: the
  digest of those inputs that proves two processes built the same case; `snapshot`: a case pinned by a file.
- `case`: `build_case`, from a case seed to its dims, kwargs, layouts and input arrays (and the user's inputs
  hook, when the op has one).
- `shapes`: dims and kwargs per size class, with the boundary sizes users do not write (1, 2, primes,
  2^k +- 1, just off the common tile sizes); `large`: the large-size class of the thorough and nightly suites.
- `layouts`: real memory layouts (transposed, strided with poisoned gaps, broadcast, odd size-1 strides).
- `values`: input values from the seed stream with exact arithmetic only (no libm), per value mode.
"""
