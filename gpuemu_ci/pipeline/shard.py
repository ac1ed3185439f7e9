"""`gpuemu-ci run --shard K/N`: a deterministic 1/N of a suite's cases, balanced by what they cost.

Every shard plans the whole suite (the same on every machine: plans are pure functions of the config and the
master seed), estimates each case's cost from its dims (drawn from its seed, as the worker will draw them;
no inputs are generated), and deals the cases out largest first to the least loaded shard. Shard K runs the
cases dealt to it. The split is by case (op x dtype x iteration), not by op, so one expensive op spreads over
every shard.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from gpuemu_ci.config.model import Family, OpSpec
from gpuemu_ci.errors import ConfigError, UsageError
from gpuemu_ci.fuzz.case import CaseSkipped, case_dims
from gpuemu_ci.fuzz.shapes import shape_of
from gpuemu_ci.plan.model import CaseRef
from gpuemu_ci.results.model import ShardInfo, ShardOp

# A case's fixed cost (two processes' hand-over, hygiene, judging's passes) in units of input elements.
CASE_OVERHEAD = 20_000
_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Shard:
    """One shard of a run split across jobs (`--shard K/N`: the K-th of N, 1-based)."""

    index: int  # 1-based
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        """Reads `K/N`; a UsageError for anything else, for K outside 1..N, or for N over 10,000."""
        match = _SHARD.match(text)
        if match is None:
            raise UsageError(f"--shard expects K/N (for example 2/4), got {text!r}")
        index, count = int(match.group(1)), int(match.group(2))
        if not 1 <= index <= count or count > 10_000:
            raise UsageError(f"--shard {text}: K must be between 1 and N (at most 10000)")
        return cls(index, count)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def case_cost(op: OpSpec, seed: int) -> int:
    """Expected cost of a case, from its dims: input elements, or the contraction's work for matmul and
    attention (M*N*K, B*S*T*D), plus a fixed part. An integer, so every machine deals the same shards."""
    try:
        dims = case_dims(op, seed)
    except (ConfigError, CaseSkipped):
        return CASE_OVERHEAD
    elements = sum(math.prod(shape_of(spec.dims, dims)) for spec in op.shapes.inputs)
    work = elements
    if op.error_model.family in (Family.MATMUL, Family.ATTENTION):
        used = {d for spec in op.shapes.inputs for d in spec.dims if isinstance(d, str)}
        work = max(elements, math.prod(dims[d] for d in used))
    if op.execution.deterministic:
        work *= 2
    return CASE_OVERHEAD + work


def deal(plans: Sequence[tuple[OpSpec, Sequence[CaseRef]]], count: int) -> dict[tuple[str, int], int]:
    """(op name, case index) -> 1-based shard: largest first, each to the least loaded shard (ties to the
    lowest shard; cases ordered by op position then index, so the deal is the same everywhere)."""
    items = [
        (-case_cost(op, ref.seed), position, ref.index, op.name)
        for position, (op, cases) in enumerate(plans)
        for ref in cases
    ]
    items.sort()
    loads = [0] * count
    owner: dict[tuple[str, int], int] = {}
    for negative_cost, _position, index, name in items:
        shard = min(range(count), key=lambda s: (loads[s], s))
        loads[shard] -= negative_cost
        owner[(name, index)] = shard + 1
    return owner


def plan_digest(
    config_sha256: str,
    seed: int,
    generator_version: str,
    suite: str,
    plans: Sequence[tuple[OpSpec, Sequence[CaseRef]]],
) -> str:
    """A hash of the whole suite's plan: equal in every shard of one run, different for another config, seed,
    generator version, suite, op selection or case count."""
    body = {
        "config": config_sha256,
        "seed": seed,
        "generator": generator_version,
        "suite": suite,
        "ops": [[op.name, [[ref.index, ref.seed] for ref in cases]] for op, cases in plans],
    }
    return hashlib.sha256(json.dumps(body, separators=(",", ":")).encode()).hexdigest()


def select(
    shard: Shard,
    plans: Sequence[tuple[OpSpec, Sequence[CaseRef]]],
    dtypes: Sequence[Sequence[str]],
    digest: str,
) -> tuple[list[list[CaseRef]], ShardInfo]:
    """This shard's cases of each op (in plan order), and what its document says about the split."""
    owner = deal(plans, shard.count)
    mine = [[ref for ref in cases if owner[(op.name, ref.index)] == shard.index] for op, cases in plans]
    info = ShardInfo(
        index=shard.index,
        count=shard.count,
        plan=digest,
        cases=sum(len(cases) for cases in mine),
        ops=tuple(
            ShardOp(name=op.name, dtypes=tuple(chosen), cases=len(cases))
            for (op, cases), chosen in zip(plans, dtypes, strict=True)
        ),
    )
    return mine, info
