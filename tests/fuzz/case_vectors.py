"""Known-answer vectors for whole cases: per case of a config's quick plan, its dims, kwargs, shapes, element
strides, dtype and the digest of its input bytes (fuzz/inputs.inputs_digest), as committed JSON files under
tests/fuzz/vectors/. The tests rebuild every case and compare, in this process and in fresh interpreters under
several PYTHONHASHSEED values.

A deliberate change to the generator changes these files: bump GENERATOR_VERSION (fuzz/values.py), then
regenerate them with

    python -m tests.fuzz.case_vectors --write

and commit them with the change. `--check` rebuilds and compares (exit 1 naming the first case that differs);
`--print NAME` writes one config's vectors to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gpuemu_ci.backends.loading import load_callable
from gpuemu_ci.config.load import load_config
from gpuemu_ci.fuzz.case import CaseSkipped
from gpuemu_ci.fuzz.inputs import case_inputs, inputs_digest
from gpuemu_ci.fuzz.values import GENERATOR_VERSION
from gpuemu_ci.plan.expand import plan_op

REPO = Path(__file__).resolve().parents[2]
VECTORS = Path(__file__).resolve().parent / "vectors"
MASTER_SEED = 1
ITERATIONS = 16  # the quick suite's slots per dtype: every value mode and size class
CORPUS_ITERATIONS = 4  # the corpus's 122 ops: the first four slots (keeps its file near 600 KB)
# name -> config: the examples, the shapes examples, the benchmark corpus, and issue 25's `pool` config
# (three free dims capped together: the set-ordered shrink that made PYTHONHASHSEED change its shapes).
CONFIGS = {
    "quickstart": REPO / "examples" / "quickstart" / "gpuemu.toml",
    "shapes": REPO / "examples" / "shapes" / "gpuemu.toml",
    "corpus": REPO / "bench" / "corpus" / "gpuemu.toml",
    "pool": VECTORS / "pool.toml",
}


def describe(config_path: Path, iterations: int = ITERATIONS) -> dict[str, Any]:
    """Every case of the config's quick plan (master seed MASTER_SEED, `iterations` slots per dtype), as its
    vector."""
    config = load_config(config_path)
    cases: list[dict[str, Any]] = []
    for op in config.ops:
        for ref in plan_op(op, MASTER_SEED, op.dtypes, iterations):
            entry: dict[str, Any] = {"case": ref.case_id, "seed": str(ref.seed)}
            try:
                case = case_inputs(op, ref.seed, config.root, load_callable)
            except CaseSkipped as exc:
                entry["skipped"] = exc.reason
            else:
                described = case.describe()
                entry.update(
                    dtype=case.dtype,
                    dims={k: int(v) for k, v in case.dims.items()},
                    kwargs=json.loads(json.dumps(dict(case.kwargs), default=repr)),
                    shapes={k: list(v) for k, v in described["shapes"].items()},
                    strides={k: list(v) for k, v in described["strides"].items()},
                    digest=inputs_digest(case),
                )
            cases.append(entry)
    return {"generator_version": GENERATOR_VERSION, "master_seed": MASTER_SEED, "cases": cases}


def build(name: str) -> dict[str, Any]:
    """The vectors of config `name` as this process builds them."""
    return describe(CONFIGS[name], CORPUS_ITERATIONS if name == "corpus" else ITERATIONS)


def vector_path(name: str) -> Path:
    return VECTORS / f"{name}.json"


def first_difference(name: str, built: dict[str, Any]) -> str | None:
    """None when `built` equals the committed vectors of `name`, else the first case that differs."""
    committed = json.loads(vector_path(name).read_text())
    if committed["generator_version"] != built["generator_version"]:
        return f"{name}: generator version {built['generator_version']}, vectors of {committed['generator_version']}"
    if len(committed["cases"]) != len(built["cases"]):
        return f"{name}: {len(built['cases'])} cases, vectors of {len(committed['cases'])}"
    for want, got in zip(committed["cases"], built["cases"], strict=True):
        if want != got:
            return f"{name}: case {got['case']} built {got}, the vector says {want}"
    return None


def dumps(vectors: dict[str, Any]) -> str:
    """One case per line: a regenerated file's diff shows which cases changed."""
    head = {k: v for k, v in vectors.items() if k != "cases"}
    lines = [json.dumps(case, sort_keys=True) for case in vectors["cases"]]
    return json.dumps(head)[:-1] + ', "cases": [\n' + ",\n".join(lines) + "\n]}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--write", action="store_true", help="regenerate every committed vector file")
    parser.add_argument("--check", nargs="*", metavar="NAME", help="rebuild and compare (default: all)")
    parser.add_argument("--print", dest="show", metavar="NAME", help="print one config's vectors")
    args = parser.parse_args(argv)
    if args.write:
        for name in CONFIGS:
            vector_path(name).write_text(dumps(build(name)))
        return 0
    if args.show:
        sys.stdout.write(dumps(build(args.show)))
        return 0
    for name in args.check or CONFIGS:
        difference = first_difference(name, build(name))
        if difference is not None:
            print(difference, file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
