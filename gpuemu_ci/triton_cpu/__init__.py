"""Triton kernels on a CPU, run as a GPU would run them (as far as a CPU can tell), and fast: one interception
layer over Triton's interpreter, a module per job.

- layer.py: the front door (`intercepted` around an op call), installing the hooks on the interpreter and
  checking afterwards that the op left them in place (guard.py); call.py holds the explicit state of a call and
  of its running launch, active.py the one global (the call being watched: Triton calls the hooks with its own
  arguments only);
- launch.py runs each launch: the programs in a seeded order, all at once where it can (vectorised.py, grid.py;
  later launches replay a traced tape: tracer.py, tape.py, replay.py), else one program at a time;
- builder_hooks.py intercepts the builder's loads, stores, atomics and dots: bounds and races (accesses.py,
  memory.py, provenance.py, touches.py), masked lanes read as the GPU reads them and TF32 dots (numerics.py),
  bfloat16 and fp8 as real numbers rounded as the GPU rounds them (lowp.py, lowp_builder.py);
- language.py makes the interpreter's patching of `triton.language` cheap; boolops.py fixes its `and`/`or`;
  autotune.py and imported.py cover every launch path a library uses; internal.py tells the layer's own errors
  from the kernel's; sites.py names the kernel's source line; report.py is what the judge reads; spent.py meters
  the seconds spent preparing launches, for the run's time split (never read by a check);
- shadow.py and shadow_ops.py: the float64 shadow run that explains a failure (`CallSettings.shadow64`): where a
  kernel's values first parted from float64 beyond rounding, and the first non-finite value made from finite
  operands.
- for the explain re-run of a recorded failure only (`CallSettings.log_stores` and the explain probes' settings):
  where.py logs where each store wrote, what_if.py notes and replaces a masked load's `other`, provenance.py
  keeps the lines a pointer's offset was computed on.
"""
