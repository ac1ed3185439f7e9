"""The fuzzer: a case's seed -> everything the op receives, byte for byte the same on every machine.

- `case`: `build_case`, the one function from a case seed to its dims, kwargs, layouts and input arrays
  (and the user's inputs hook, when the op has one).
- `shapes`: dims and kwargs per size class, with the boundary sizes users do not write (1, 2, primes,
  2^k +- 1, just off the common tile sizes); `large`: the large-size class of the thorough and nightly suites.
- `layouts`: real memory layouts (transposed, strided with poisoned gaps, broadcast, odd size-1 strides).
- `values`: input values from the seed stream with exact arithmetic only (no libm), per value mode.
"""
