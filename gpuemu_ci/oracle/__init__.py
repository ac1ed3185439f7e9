"""The oracle: one case's verdict, from the op's outputs and the fp64 reference on the same rounded inputs.

- `judge`: the verdict of a case (`judge`, `comparator_for`): the comparison plus the checks that need no
  tolerance (inputs unchanged, output fully written, bitwise determinism, non-finite classes).
- `bounds`: the a-priori error bound per op family; `compare`: the element-wise comparison under a bound or
  under explicit atol/rtol; `conditioning`: the problem's conditioning, the reference run on inputs moved by
  one rounding; `precision`: the working precision and the error model built from that measurement;
  `declared_intermediates`: quantities the op declares it computes itself (`[ops.intermediates]`).
- `invariants`: the declared invariants and the bias z-test; `argmax`: the `argmax` family;
  `gradients`: judging the gradients of ops declared `backward = true`.
- `case_report`: the judging half of a case: the statistics rules that apply to it, its gradients folded
  into its verdict, the `CaseReport` (the judge side in backends/ calls user code and hands the calls here).
- `model`: the verdicts, plain data (`CaseVerdict`, `ErrorStats`, `Finding`).
Pure functions of arrays, calls (`gpuemu_ci.calls`) and the op's spec: the oracle runs no user code itself.
"""
