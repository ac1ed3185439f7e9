"""`gpuemu-ci run --shard K/N` and `gpuemu-ci merge`: the merged document of the shards is the document of the
unsharded run (same case seeds, verdicts, failures and summary), it goes through the same diff, renderers and
signing, and shards that do not belong together are refused with exit 2 saying why."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuemu_ci.results.codec import read_results
from tests.conftest import EXAMPLES
from tests.support_cli import CliResult

# Fields that say when and how long, never what was found: they differ between any two runs.
TIMING = ("started_at", "finished_at")

FAILING_SUITE = """
[project]
name = "many-failures"

[validation]
dtypes = ["float32", "float16"]
seed = 99

[ci]
quick_dtypes = ["float32", "float16"]
quick_iterations = 16

[[ops]]
name = "always_wrong"         # every case fails: more failures than are recorded
op = "ops:always_wrong"
reference = "ops:ref"
family = "elementwise"
[ops.dims]
N = { min = 1, max = 300, typical = [64, 128] }
[ops.inputs]
x = ["N"]

[[ops]]
name = "flaky_reference"      # some cases cannot be judged: the reference raises on odd sizes
op = "ops:identity"
reference = "ops:picky_ref"
family = "elementwise"
[ops.dims]
N = { min = 1, max = 300, typical = [64, 128] }
[ops.inputs]
x = ["N"]

[[ops]]
name = "crashes_sometimes"    # a worker dies on every case of size 1..3
op = "ops:crash_small"
reference = "ops:ref"
family = "elementwise"
[ops.dims]
N = { min = 1, max = 300, typical = [64, 128] }
[ops.inputs]
x = ["N"]

[[ops]]
name = "needs_a_gpu"          # skipped everywhere (no GPU here)
op = "ops:identity"
reference = "ops:ref"
family = "elementwise"
require_gpu = true
[ops.dims]
N = [8]
[ops.inputs]
x = ["N"]
"""

FAILING_OPS = """
import os
import numpy as np

def always_wrong(x):
    return x + np.asarray(1, x.dtype)

def identity(x):
    return x.copy()

def ref(x):
    return x

def picky_ref(x):
    if x.shape[0] % 2:
        raise ValueError("odd sizes are not supported by this reference")
    return x

def crash_small(x):
    if x.shape[0] <= 3:
        os._exit(7)
    return x.copy()
"""


def _normalised(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text())
    for key in TIMING:
        document.pop(key)
    document["summary"].pop("duration_s")
    for op in document["ops"]:
        op.pop("timings", None)  # measured: every run's own
        for row in op["dtypes"]:
            row.pop("duration_s")  # measured: every run's own
    return document


def _sharded_and_whole(
    cli: Callable[..., CliResult], config: Path, out: Path, shards: int = 4, extra: tuple[str, ...] = ()
) -> tuple[CliResult, CliResult]:
    whole = cli("run", "--config", config, "--out", out / "whole", "--no-lint", *extra)
    for k in range(1, shards + 1):
        part = cli(
            "run", "--config", config, "--shard", f"{k}/{shards}", "--out", out / f"s{k}", "--no-lint", *extra
        )
        assert part.code in (0, 1, 3), part.stderr
        assert json.loads((out / f"s{k}" / "results.json").read_text())["shard"]["index"] == k
    merged = cli(
        "merge",
        *(out / f"s{k}" / "results.json" for k in range(1, shards + 1)),
        "-o",
        out / "merged" / "results.json",
    )
    return whole, merged


@pytest.mark.slow
@pytest.mark.parametrize("project", ["quickstart", "bug-zoo"])
def test_merged_shards_are_the_unsharded_document(
    cli: Callable[..., CliResult], tmp_path: Path, project: str
) -> None:
    whole, merged = _sharded_and_whole(cli, EXAMPLES / project / "gpuemu.toml", tmp_path)
    assert merged.code == whole.code, merged.stderr
    assert _normalised(tmp_path / "merged" / "results.json") == _normalised(
        tmp_path / "whole" / "results.json"
    )
    whole_snaps = sorted(p.name for p in (tmp_path / "whole").glob("snapshots/*"))
    assert sorted(p.name for p in (tmp_path / "merged").glob("snapshots/*")) == whole_snaps


@pytest.mark.slow
def test_a_suite_with_failures_errors_crashes_and_skips_merges_exactly(
    cli: Callable[..., CliResult], make_project: Callable[..., Path], tmp_path: Path
) -> None:
    config = make_project(FAILING_SUITE, {"ops.py": FAILING_OPS})
    whole, merged = _sharded_and_whole(cli, config, tmp_path / "out", shards=3)
    assert whole.code == merged.code == 1
    document = _normalised(tmp_path / "out" / "whole" / "results.json")
    ops = {op["name"]: op for op in document["ops"]}
    assert ops["always_wrong"]["failures_omitted"] > 0 and len(ops["always_wrong"]["failures"]) == 20
    assert ops["flaky_reference"]["cases_errored"] > 0
    assert any(f["kind"] == "crashed" for f in ops["crashes_sometimes"]["failures"])
    assert ops["needs_a_gpu"]["status"] == "skipped"
    assert _normalised(tmp_path / "out" / "merged" / "results.json") == document


@pytest.mark.slow
def test_merged_results_render_and_sign_like_a_single_run(
    cli: Callable[..., CliResult], make_project: Callable[..., Path], tmp_path: Path
) -> None:
    config = make_project(
        FAILING_SUITE.replace("quick_iterations = 16", "quick_iterations = 4"), {"ops.py": FAILING_OPS}
    )
    out = tmp_path / "out"
    _sharded_and_whole(cli, config, out, shards=2)
    whole = out / "whole" / "results.json"
    merged = _with_times_of(out / "merged" / "results.json", whole, tmp_path / "timed")
    for fmt in ("sarif", "junit", "comment", "summary", "annotations"):
        rendered = [cli("render", fmt, path) for path in (merged, whole)]
        assert rendered[0].code == rendered[1].code == 0, rendered[0].stderr
        assert rendered[0].stdout == rendered[1].stdout, fmt
    baseline = cli("baseline", "create", "--from", whole, "-o", tmp_path / "baseline.json")
    assert baseline.code == 0, baseline.stderr
    diffed = cli(
        "merge", out / "s1" / "results.json", out / "s2" / "results.json", "-o", tmp_path / "diffed.json",
        "--baseline", tmp_path / "baseline.json", "--config", config,
    )  # fmt: skip
    assert diffed.code == 1
    assert read_results(tmp_path / "diffed.json").compared is not None
    key = tmp_path / "gpuemu.key"
    assert cli("keygen", "-o", key).code == 0
    report = tmp_path / "report.dsse.json"
    commit = "a" * 40
    signed = cli("sign", merged, "--key", key, "-o", report, "--repo", "octo/kernels", "--commit", commit)
    assert signed.code == 0, signed.stderr
    verified = cli("verify", report, "--key", f"{key}.pub", "--repo", "octo/kernels", "--commit", commit)
    assert verified.code == 0, verified.stderr


def _with_times_of(path: Path, other: Path, directory: Path) -> Path:
    """`path`'s document with the timestamps and durations of `other` (snapshots stay where they are)."""
    import msgspec

    from gpuemu_ci.results.codec import write_results

    document, times = read_results(path), read_results(other)
    timed = {(op.name, row.dtype): row.duration_s for op in times.ops for row in op.dtypes}
    clocked = {op.name: op.timings for op in times.ops}
    ops = tuple(
        msgspec.structs.replace(
            op,
            timings=clocked[op.name],
            dtypes=tuple(
                msgspec.structs.replace(row, duration_s=timed[(op.name, row.dtype)]) for row in op.dtypes
            ),
        )
        for op in document.ops
    )
    document = msgspec.structs.replace(
        document, started_at=times.started_at, finished_at=times.finished_at, summary=times.summary, ops=ops
    )
    directory.mkdir()
    shutil.copytree(path.parent / "snapshots", directory / "snapshots")
    return write_results(directory, document)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "words"),
    [
        (("--seed", "5"), "master seed differs"),
        (("--iterations", "3"), "plan (ops, dtypes, case seeds) differs"),
    ],
)
def test_shards_of_different_runs_are_refused(
    cli: Callable[..., CliResult], tmp_path: Path, change: tuple[str, ...], words: str
) -> None:
    config = EXAMPLES / "quickstart" / "gpuemu.toml"
    base = ("--op", "gelu", "--iterations", "2", "--no-lint")
    one = cli("run", "--config", config, "--shard", "1/2", "--out", tmp_path / "a", *base)
    two = cli("run", "--config", config, "--shard", "2/2", "--out", tmp_path / "b", *base, *change)
    assert one.code == 0 and two.code == 0, one.stderr + two.stderr
    merged = cli(
        "merge", tmp_path / "a" / "results.json", tmp_path / "b" / "results.json", "-o", tmp_path / "m.json"
    )
    assert merged.code == 2 and words in merged.stderr and "shards of different runs" in merged.stderr
    assert not (tmp_path / "m.json").exists()


@pytest.mark.slow
def test_a_missing_or_duplicate_shard_is_refused_saying_which(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    config = EXAMPLES / "quickstart" / "gpuemu.toml"
    for k in (1, 2):
        part = cli("run", "--config", config, "--op", "gelu", "--iterations", "3", "--no-lint", "--shard", f"{k}/3",
                   "--out", tmp_path / f"s{k}")  # fmt: skip
        assert part.code == 0, part.stderr
    first, second = tmp_path / "s1" / "results.json", tmp_path / "s2" / "results.json"
    missing = cli("merge", first, second, "-o", tmp_path / "m.json")
    assert missing.code == 2 and "shard 3/3 missing" in missing.stderr
    twice = cli("merge", first, second, first, "-o", tmp_path / "m.json")
    assert twice.code == 2 and "shard 1/3 is given twice" in twice.stderr
    whole = cli(
        "run", "--config", config, "--op", "gelu", "--iterations", "3", "--no-lint", "--out", tmp_path / "w"
    )
    assert whole.code == 0
    unsharded = cli("merge", first, tmp_path / "w" / "results.json", "-o", tmp_path / "m.json")
    assert unsharded.code == 2 and "not the document of a shard" in unsharded.stderr


@pytest.mark.parametrize("text", ["0/4", "5/4", "a/b", "2", "1/0"])
def test_a_bad_shard_is_a_usage_error(cli: Callable[..., CliResult], tmp_path: Path, text: str) -> None:
    result = cli(
        "run", "--config", EXAMPLES / "quickstart" / "gpuemu.toml", "--shard", text, "--out", tmp_path
    )
    assert result.code == 2 and "--shard" in result.stderr


@pytest.mark.slow
def test_every_case_runs_in_exactly_one_shard_balanced_by_cost(tmp_path: Path) -> None:
    from gpuemu_ci.config.load import load_config
    from gpuemu_ci.pipeline.settings import RunOptions, Settings
    from gpuemu_ci.pipeline.shard import case_cost, deal
    from gpuemu_ci.plan.expand import plan_op

    config = load_config(EXAMPLES / "quickstart" / "gpuemu.toml", env={"GPUEMU_USER_CONFIG": "none"})
    settings = Settings.resolve(config, RunOptions())
    plans = [(op, plan_op(op, settings.seed, op.dtypes, 100)) for op in config.ops]
    owner = deal(plans, 4)
    assert sorted(owner) == sorted((op.name, ref.index) for op, cases in plans for ref in cases)
    loads = [0] * 4
    for op, cases in plans:
        for ref in cases:
            loads[owner[(op.name, ref.index)] - 1] += case_cost(op, ref.seed)
    assert max(loads) <= 1.05 * min(loads)  # balanced by expected cost
    matmul = {owner[("matmul", ref.index)] for ref in plans[2][1]}
    assert matmul == {1, 2, 3, 4}  # one op spreads over every shard
    assert deal(plans, 4) == owner  # the same deal every time, everywhere


@pytest.mark.slow
def test_shards_of_another_config_or_generator_are_refused_saying_which(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    source = (EXAMPLES / "quickstart" / "gpuemu.toml").read_text()
    project = tmp_path / "project"
    shutil.copytree(EXAMPLES / "quickstart", project)
    base = ("--op", "gelu", "--iterations", "2", "--no-lint")
    one = cli("run", "--config", project / "gpuemu.toml", "--shard", "1/2", "--out", tmp_path / "a", *base)
    (project / "gpuemu.toml").write_text(source + "\n# edited between the shards\n")
    two = cli("run", "--config", project / "gpuemu.toml", "--shard", "2/2", "--out", tmp_path / "b", *base)
    assert one.code == 0 and two.code == 0, one.stderr + two.stderr
    first, second = tmp_path / "a" / "results.json", tmp_path / "b" / "results.json"
    merged = cli("merge", first, second, "-o", tmp_path / "m.json")
    assert merged.code == 2 and "their config differs" in merged.stderr
    document = json.loads(second.read_text())
    document["config"] = json.loads(first.read_text())["config"]
    document["generator_version"] = "2"
    second.write_text(json.dumps(document))
    merged = cli("merge", first, second, "-o", tmp_path / "m.json")
    assert merged.code == 2 and "input generator version differs" in merged.stderr
