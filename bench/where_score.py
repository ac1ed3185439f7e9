"""How often a Triton failure's "where" names the bug's line (issue #47, item 4).

For every Triton bug entry of the corpus (bench/corpus) and of the field mutants (bench/field, Liger-Kernel's
kernels with one edit each), the line a run reports for the entry's worst recorded failure is compared with the
entry's edited line and the first line its effect reaches (the first later line whose value the edit changes).
The lines a failure reports: every line its `where` names (the store's, a layer probe's, and what the explain
re-run of the failure found: a masked load's `other`, an out-of-bounds pointer's offsets, the first non-finite
value; backends/explain.py), and the line of an out-of-bounds or race finding in its message.

    python bench/where_score.py                       # runs both suites (master seed 1), then scores
    python bench/where_score.py --corpus DIR --field DIR   # scores saved runs (results.json in each)

Prints one row per entry and the rate; exits 0 (a measurement, not a gate). Needs torch, triton and, for the
field entries, liger-kernel 0.8.5 (`pip install --no-deps liger-kernel==0.8.5`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from corpus_score import run_gpuemu  # noqa: E402  # a sibling script (the bench folder is not a package)

SEED = 1  # one master seed for both suites
SITE = re.compile(r" at ([^:()]+?):(\d+) \(in (\w+)\)")

# entry -> (the function the bug is in, the acceptable lines in that function's source file, why).
# Lines are those of bench/corpus/corpus_kernels/*.py, of Liger's installed source, or of a field mutant's
# source (the mutated function alone, as field_kernels/mutate.py registers it).
EXPECTED: dict[str, tuple[str, frozenset[int], str]] = {
    "rmsnorm_triton_bwd.bug.grad_acc_assign": (
        "_sum_rows",
        frozenset({55, 58}),
        "`acc =` for `acc +=`; its store",
    ),
    "tri_row_max.bug.tail_other_missing": ("_row_max", frozenset({42, 43}), "load without other; its max"),
    "tri_scale.bug.store_past_end": ("_scale", frozenset({85}), "the unmasked store"),
    "tri_scale.bug.stride_assumption": (
        "_scale",
        frozenset({77}),
        "launcher passes no stride; the load uses it",
    ),
    "tri_col_sum.bug.split_k_no_atomic": ("_col_sum", frozenset({176, 177, 178}), "load-add-store"),
    "tri_col_sum.bug.nondeterministic": ("_col_sum", frozenset({175}), "the atomic sum in program order"),
    "tri_row_cumsum.bug.dot_needs_ieee": ("_row_cumsum", frozenset({250, 251}), "tl.dot at TF32"),
    "tri_matmul.bug.dropped_k_tail": ("_matmul", frozenset({297, 298}), "the K loop's bound"),
    "tri_tile_add.bug.missing_row_mask": ("_tile_add", frozenset({351, 354}), "the mask; its first use"),
    "tri_scale.bug.truncating_bf16_store": ("_scale", frozenset({78, 79, 80, 81}), "truncation at the store"),
    "tri_fp8_roundtrip.bug.fp8_wrong_format": ("_fp8_roundtrip", frozenset({138, 139, 142}), "e5m2; its use"),
    "liger_rms_norm.bug.eps_ignored": ("_rms_norm_forward_kernel", frozenset({63, 68}), "rstd without eps"),
    "liger_layer_norm.bug.one_pass_variance": ("_layer_norm_forward_kernel", frozenset({49, 50}), "var"),
    "liger_group_norm.upstream.one_pass_variance": ("_group_norm_forward_kernel", frozenset({75, 78}), "var"),
    "liger_group_norm.bug.wrong_affine_index": ("_group_norm_forward_kernel", frozenset({64, 66}), "W index"),
    "liger_softmax.bug.mask_other_zero": (
        "_softmax_single_block_forward_kernel",
        frozenset({14, 15}),
        "other",
    ),
    "liger_cross_entropy.bug.mask_other_zero": (
        "liger_cross_entropy_kernel",
        frozenset(range(120, 140)),
        "other",
    ),
    "liger_cross_entropy.bug.max_init_zero": (
        "liger_cross_entropy_kernel",
        frozenset({110, 154}),
        "m = 0; the tl.maximum that keeps it",
    ),
    "liger_cross_entropy.bug.row_stride_n": ("liger_cross_entropy_kernel", frozenset({102}), "X_ptr stride"),
    "liger_rope.upstream.size1_stride": (
        "_triton_rope",
        frozenset({40, 41}),
        "the launcher's row stride of a size-1 dim; its use",
    ),
    "liger_rope.bug.partial_rotary_offset": (
        "_triton_rope",
        frozenset({82, 83, 86, 87}),
        "second-half offsets; their loads",
    ),
}


def reported(failure: dict) -> list[tuple[str, int]]:
    """(function, line) of every line a failure names: its `where` and the sites in its message."""
    text = " ".join(filter(None, (failure.get("where"), failure.get("message"))))
    return [(fn, int(line)) for _, line, fn in SITE.findall(text)]


def score(documents: list[dict]) -> tuple[int, int, list[str]]:
    rows, hits, total = [], 0, 0
    for document in documents:
        for op in document["ops"]:
            expected = EXPECTED.get(op["name"])
            if expected is None:
                continue
            total += 1
            function, lines, why = expected
            worst = op["failures"][0] if op["failures"] else None
            named = reported(worst) if worst else []
            hit = any(fn == function and line in lines for fn, line in named)
            hits += hit
            said = ", ".join(f"{fn}:{line}" for fn, line in named) or (
                (worst or {}).get("where") or "no line named"
            )
            kind = (worst or {}).get("kind", "passed")
            rows.append(
                f"{'HIT ' if hit else 'miss'} {op['name']} [{kind}]: named {said}; bug at {sorted(lines)} ({why})"
            )
    return hits, total, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, help="a saved run of the corpus entries (its directory)")
    parser.add_argument("--field", type=Path, help="a saved run of the field entries (its directory)")
    args = parser.parse_args()
    documents = []
    with tempfile.TemporaryDirectory() as scratch:
        for name, saved, config in (
            ("corpus", args.corpus, ROOT / "bench" / "corpus" / "gpuemu.toml"),
            ("field", args.field, ROOT / "bench" / "field" / "gpuemu.toml"),
        ):
            if saved is not None:
                documents.append(json.loads((saved / "results.json").read_text()))
                continue
            prefix = "liger_" if name == "field" else ""
            entries = [
                e for e in EXPECTED if e.startswith(prefix) and (name == "field") == e.startswith("liger_")
            ]
            documents.append(run_gpuemu(config, SEED, Path(scratch) / name, entries))
    hits, total, rows = score(documents)
    print("\n".join(rows))
    print(f"where names the bug's line (or the first line it reaches): {hits} of {total} Triton bug entries "
          f"({100.0 * hits / max(total, 1):.0f}%)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
