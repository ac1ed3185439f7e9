"""The plan: config + suite -> the ordered cases of each op, coverage guaranteed by construction.

- `expand`: `plan_op`, every op's cases (dtype x size class x layout x value mode x kwargs), each with its
  case seed derived from the master seed; `stratum`, a case's strata from its seed.
- `model`: a case (`CaseRef`: one op called once, identified by master seed and case index) and the strata
  it is drawn from (`CaseStratum`, `SizeClass`, `ValueMode`).
"""
