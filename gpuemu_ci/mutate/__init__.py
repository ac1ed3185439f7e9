"""`gpuemu-ci mutate`: the gate measured on the user's own kernels. Known bugs are planted in the Triton
kernels an op runs (triton_operators.py), each mutant runs the op's suite in the usual isolated workers with the
kernel swapped in memory (backends/mutant.py), and the survivors say what the config lacks (hints.py).

- `source`, `kernel`: a kernel's file as text and its `def`; `triton_operators`: the changes;
- `plan`: which mutants, in which order; `batches`: cases through the pool; `cache`: verdicts kept;
- `run`: the whole of it, into the results document's `mutation` part.
"""
