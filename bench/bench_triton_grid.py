"""The vectorised grid (gpuemu_ci/triton_cpu/grid.py) against the per-program interpreter, side by side in one
process: every Triton op of a gpuemu.toml, every case of the quick suite of each master seed, the op called
once per-program and once vectorised (both under the GPU-faithful layer, on the same inputs from the case
seed); the cases of an op run one after another in this process, so that later cases replay the tapes traced
by earlier ones (replay.py), as in a worker. Prints per op the time of each mode, their ratio, and how the
launches ran (vectorised, replayed, or one program at a time and why); exits 1 when any case's outputs differ
in a single bit, or its findings differ.

    TRITON_INTERPRET=1 is set here, before Triton is imported.
    python bench/bench_triton_grid.py                                  # the corpus's Triton ops, seeds 1-3
    python bench/bench_triton_grid.py --config bench/field/gpuemu.toml --only liger_rms_norm.control --seeds 1
    python bench/bench_triton_grid.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import numpy as np  # noqa: E402

from gpuemu_ci.backends import triton_probe  # noqa: E402

triton_probe.watch_imports()

from gpuemu_ci.backends.interface import CaseSpec, OpTask  # noqa: E402
from gpuemu_ci.backends.op_side import OpSide, run_op_side  # noqa: E402
from gpuemu_ci.config.load import load_config  # noqa: E402
from gpuemu_ci.config.model import Config, OpSpec  # noqa: E402
from gpuemu_ci.pipeline.targets import naive_target, op_target, reference_target  # noqa: E402
from gpuemu_ci.plan.expand import plan_op  # noqa: E402
from gpuemu_ci.triton_cpu import layer  # noqa: E402

DEFAULT_CONFIG = HERE / "corpus" / "gpuemu.toml"
TRITON_MODULES = ("triton", "liger")  # op targets whose module names say they launch Triton kernels


@dataclass
class OpFigures:
    cases: int = 0
    per_program_s: float = 0.0
    vectorised_s: float = 0.0
    vectorised_launches: int = 0
    grouped_launches: int = 0  # of those, run in groups of programs that agree on a divergent branch
    replayed_launches: int = 0  # of those, replayed from the tape of an earlier launch (replay.py)
    abandoned_replays: int = 0  # replays whose guards did not hold (the launch ran the vectorised pass)
    per_program_launches: dict[str, int] = field(default_factory=dict)
    mismatches: list[str] = field(default_factory=list)


def triton_ops(config: Config, only: Sequence[str]) -> list[OpSpec]:
    ops = [op for op in config.ops if any(m in op.targets.op.split(":")[0] for m in TRITON_MODULES)]
    return [op for op in ops if not only or op.name in only or op.name.split(".")[0] in only]


def _task(config: Config, op: OpSpec, seed: int) -> OpTask:
    root = config.root
    return OpTask(
        key=op.name,
        op=op,
        validation=config.validation,
        root=root,
        op_target=op_target(op, root),
        reference=reference_target(op, root),
        naive=naive_target(op, root),
        timeout_s=600.0,
        master_seed=seed,
        out_dir=None,
    )


def _digest(side: OpSide) -> tuple[object, ...]:
    """What must be identical between the modes: statuses, every output's bytes, the findings."""
    calls = [side.op] + ([side.rerun] if side.rerun is not None else [])
    outputs = tuple(
        (c.status.value, tuple((o.dtype.str, o.shape, np.ascontiguousarray(o).tobytes()) for o in c.outputs))
        for c in calls
    )
    findings = side.triton.findings if side.triton is not None else ()
    decided = (
        side.triton.decided if side.triton is not None else ()
    )  # what the probes found (layer_probes.py)
    return outputs, findings, decided, side.inputs_modified, side.interpreter_types


def _run(task: OpTask, spec: CaseSpec, vectorise: bool) -> tuple[OpSide, float]:
    layer.set_vectorise(vectorise)
    started = time.perf_counter()
    side = run_op_side(task, spec, contain=Exception)
    return side, time.perf_counter() - started


def compare(config_path: Path, seeds: Sequence[int], only: Sequence[str] = ()) -> dict[str, OpFigures]:
    config = load_config(config_path)
    figures: dict[str, OpFigures] = {}
    for op in triton_ops(config, only):
        got = figures.setdefault(op.name, OpFigures())
        for seed in seeds:
            task = _task(config, op, seed)
            extra = min(config.ci.quick_iterations, 8)
            for ref in plan_op(op, seed, op.dtypes, config.ci.quick_iterations, extra_iterations=extra):
                spec = CaseSpec(ref.seed, ref.index, snapshot_wanted=False)
                plain, plain_s = _run(task, spec, False)
                before = dict(layer.PROCESS.kernels.counts)
                fast, fast_s = _run(task, spec, True)
                got.replayed_launches += layer.PROCESS.kernels.counts["replayed"] - before["replayed"]
                got.abandoned_replays += layer.PROCESS.kernels.counts["abandoned"] - before["abandoned"]
                got.cases += 1
                got.per_program_s += plain_s
                got.vectorised_s += fast_s
                if fast.triton is not None:
                    got.vectorised_launches += fast.triton.vectorised
                    got.grouped_launches += sum(n for _, n in fast.triton.grouped)
                    for why, count in fast.triton.per_program:
                        got.per_program_launches[why] = got.per_program_launches.get(why, 0) + count
                if _digest(plain) != _digest(fast):
                    got.mismatches.append(f"seed {seed} case {ref.index} (case seed {ref.seed})")
    layer.set_vectorise(True)
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    figures = compare(args.config, range(1, args.seeds + 1), args.only)
    print(f"{'op':<44} {'cases':>5} {'per-program s':>13} {'vectorised s':>12} {'speedup':>8}  launches")
    for name, f in figures.items():
        ratio = f.per_program_s / f.vectorised_s if f.vectorised_s else float("nan")
        fallen = ", ".join(f"{n} {why}" for why, n in sorted(f.per_program_launches.items()))
        grouped = f" ({f.grouped_launches} in groups)" if f.grouped_launches else ""
        replayed = f", {f.replayed_launches} of them replayed ({f.abandoned_replays} replays abandoned)"
        launches = f"{f.vectorised_launches} vectorised{grouped}{replayed}" + (
            f"; per program: {fallen}" if fallen else ""
        )
        print(
            f"{name:<44} {f.cases:>5} {f.per_program_s:>13.2f} {f.vectorised_s:>12.2f} {ratio:>7.1f}x  {launches}"
        )
        for mismatch in f.mismatches:
            print(f"  DIFFERS: {mismatch}")
    total_plain = sum(f.per_program_s for f in figures.values())
    total_fast = sum(f.vectorised_s for f in figures.values())
    differing = sum(len(f.mismatches) for f in figures.values())
    cases = sum(f.cases for f in figures.values())
    print(
        f"total: {cases} cases, per-program {total_plain:.1f} s, vectorised {total_fast:.1f} s "
        f"({total_plain / max(total_fast, 1e-9):.1f}x); cases whose outputs or findings differ: {differing}"
    )
    if args.json is not None:
        args.json.write_text(json.dumps({n: vars(f) for n, f in figures.items()}, indent=2))
    return 1 if differing or not cases else 0


if __name__ == "__main__":
    raise SystemExit(main())
