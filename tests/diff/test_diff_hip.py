"""HIP kernel regressions between real `gpuemu-ci run`s that compile [[kernels]] with clang for AMD GPUs:
a change that spills is a regression per gfx arch, in the AMDGPU compiler's terms, in the diff and in the PR
comment; another clang is a toolchain change, not a regression."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.diff.support_diff import entry, gpuemu, load, reason, valid_diff, valid_results
from tests.lint.support_hip import EXAMPLE, hip_toolchain, requires_hip
from tests.support_cli import run_cli

pytestmark = [pytest.mark.slow, requires_hip]

CONFIG = """
[project]
name = "hip-kernels"

[[kernels]]
name = "horner_spill"
source = "k/horner_spill.hip"
archs = ["gfx90a", "gfx1030"]

[[kernels]]
name = "gelu"
source = "k/gelu.hip"
archs = ["gfx90a"]
"""


def _project(root: Path, polys: int) -> None:
    (root / "k").mkdir(exist_ok=True)
    for name in ("gelu.hip", "gelu_math.h"):
        shutil.copy(EXAMPLE / "kernels" / name, root / "k" / name)
    source = (EXAMPLE / "kernels" / "horner_spill.hip").read_text()
    assert "#define POLYS 96" in source
    (root / "k" / "horner_spill.hip").write_text(source.replace("#define POLYS 96", f"#define POLYS {polys}"))
    (root / "gpuemu.toml").write_text(CONFIG)


def test_a_kernel_that_now_spills_regresses_on_the_arch_where_it_spills(tmp_path: Path) -> None:
    _project(tmp_path, 32)  # the pull request's base: 32 live polynomials fit the VGPR budget
    base = gpuemu("run", "--config", "gpuemu.toml", "--out", "base", cwd=tmp_path)
    assert base.returncode == 0, base.stderr
    _project(tmp_path, 160)  # the change: 160 live values, more than 64 VGPRs hold on gfx90a
    current = gpuemu(
        "run", "--config", "gpuemu.toml", "--out", "now", "--baseline", "base/results.json", cwd=tmp_path
    )
    assert current.returncode == 1, current.stderr
    results = load(tmp_path / "now" / "results.json")
    valid_results(results)
    diff = results["diff"]
    valid_diff(diff)
    spilled = entry(diff, "horner_spill", "gfx90a")
    assert spilled["classification"] == "regressed" and spilled["severity"] == "error"
    spills = reason(spilled, "spills")
    assert spills["old"] == 0 and spills["new"] > 0
    assert spills["message"].startswith(
        f"spilled registers (VGPRs + SGPRs) 0 -> {spills['new']} (+{spills['new']}, more than max_spill_increase = 0)"
    )
    scratch = reason(spilled, "local_memory")
    assert scratch["old"] == 0 and scratch["new"] > 0 and "scratch per lane 0 B ->" in scratch["message"]
    vgprs = reason(spilled, "registers")
    assert vgprs["message"].startswith(f"VGPRs {vgprs['old']} -> {vgprs['new']}")
    # Each arch is its own entry; the kernel the change did not touch is unchanged.
    assert entry(diff, "horner_spill", "gfx1030")["classification"] in ("regressed", "unchanged", "improved")
    assert entry(diff, "gelu", "gfx90a")["classification"] == "unchanged"
    # The PR comment shows it per arch, with the compiler's words.
    comment = run_cli(["render", "comment", tmp_path / "now" / "results.json"])
    assert comment.code == 0, comment.output
    rows = [line for line in comment.stdout.splitlines() if "horner_spill" in line and "gfx90a" in line]
    assert rows and any("spilled registers (VGPRs + SGPRs) 0 -&gt; " in row for row in rows), comment.stdout


def _clangs() -> list[Path]:
    """The directories of two different clangs with the AMDGPU backend, when this machine has them."""
    found = []
    for version in range(30, 13, -1):
        exe = shutil.which(f"clang++-{version}")
        if exe:
            found.append(Path(exe).resolve().parent)
    return found


def test_another_clang_is_a_toolchain_change_not_a_regression(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clangs = _clangs()
    if len(clangs) < 2:
        pytest.skip(
            "one clang with the AMDGPU backend here; this test needs two (Debian 12: clang-15 and clang-16)"
        )
    _project(tmp_path, 96)
    monkeypatch.setenv("HIP_CLANG_PATH", str(clangs[-1]))  # the oldest
    base = gpuemu("run", "--config", "gpuemu.toml", "--out", "base", cwd=tmp_path)
    monkeypatch.setenv("HIP_CLANG_PATH", str(clangs[0]))  # the newest
    current = gpuemu(
        "run", "--config", "gpuemu.toml", "--out", "now", "--baseline", "base/results.json", cwd=tmp_path
    )
    assert base.returncode == 0 and current.returncode == 0, base.stderr + current.stderr
    diff = load(tmp_path / "now" / "results.json")["diff"]
    e = entry(diff, "horner_spill", "gfx90a")
    assert e["classification"] == "toolchain_changed"
    clang = reason(e, "toolchain.clang")
    assert clang["old"] != clang["new"] and clang["message"] == f"clang {clang['old']} -> {clang['new']}"
    assert all(
        r["message"].endswith("not counted: the toolchain changed")
        for r in e["reasons"]
        if not r["metric"].startswith("toolchain")
    )
    assert hip_toolchain().clang_version in (clang["old"], clang["new"])
