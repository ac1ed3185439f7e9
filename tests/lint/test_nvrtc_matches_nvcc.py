"""Lint without nvcc (issue #15, item 3): NVRTC to PTX, then the ptxas of NVRTC's release. Its registers, spills,
stack frame and shared memory must equal what nvcc -Xptxas -v reports for the same source, flags and arch: on
every ptx-lint fixture, bench/bench_lint.py's sources and flag variants, against this machine's nvcc and
(when installed) NVIDIA's nvcc wheel of NVRTC's own release. Sources NVRTC cannot compile (host code, host
headers) are not linted and say so; they are never given numbers from another compile.

The real compilers run; the test skips where nvcc or the NVRTC wheel (13.1 or later) is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.lint.support_frontends import DEVICE_ONLY, measure, write_project

ARCHS = ("sm_80", "sm_90", "sm_120")
NOT_FOR_NVRTC = {"printf": "cstdio", "noinline": "cstdio", "internal": "host code"}


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any] | None]:
    config = write_project(tmp_path_factory.mktemp("frontends"), ARCHS)
    results = {route: measure(route, config) for route in ("nvrtc", "nvcc-system", "nvcc-wheel")}
    if results["nvrtc"] is None:
        pytest.skip("no NVRTC wheel of 13.1 or later here (pip install nvidia-cuda-nvrtc nvidia-cuda-nvcc)")
    if results["nvcc-system"] is None and results["nvcc-wheel"] is None:
        pytest.skip("no nvcc to compare with")
    return results


@pytest.mark.slow
@pytest.mark.parametrize("reference", ["nvcc-system", "nvcc-wheel"])
def test_nvrtc_reports_exactly_what_nvcc_reports(
    measured: dict[str, dict[str, Any] | None], reference: str
) -> None:
    nvcc = measured[reference]
    if nvcc is None:
        pytest.skip(f"{reference} is not on this machine")
    nvrtc = measured["nvrtc"]
    assert nvrtc is not None
    compared = 0
    for name, ours in nvrtc["kernels"].items():
        if ours["status"] == "error":
            continue  # asserted below: not linted, and why
        theirs = nvcc["kernels"][name]
        assert set(ours["entries"]) == set(theirs["entries"]), name
        for key, metrics in ours["entries"].items():
            assert metrics == theirs["entries"][key], (name, key, metrics, theirs["entries"][key])
            compared += 1
    # every fixture, bench source and flag variant that NVRTC can compile, on every arch
    assert compared >= 100


@pytest.mark.slow
def test_sources_nvrtc_cannot_compile_are_not_linted_and_say_why(
    measured: dict[str, dict[str, Any] | None],
) -> None:
    nvrtc = measured["nvrtc"]
    assert nvrtc is not None
    refused = {name for name, k in nvrtc["kernels"].items() if k["status"] == "error"}
    expected = set(NOT_FOR_NVRTC) | {n for n in nvrtc["kernels"] if n.startswith(("bench_04_", "bench_05_"))}
    assert refused == expected
    for name in refused:
        kernel = nvrtc["kernels"][name]
        assert kernel["entries"] == {}  # no numbers from any other compile
        assert kernel["error"].startswith("not linted: NVRTC"), kernel["error"]
        assert NOT_FOR_NVRTC.get(name, "cstdio") in kernel["error"]
    for name in DEVICE_ONLY:  # the same kernels without the host parts are linted, and match nvcc (above)
        assert nvrtc["kernels"][name]["status"] == "passed"


def test_flags_without_an_nvrtc_equivalent_are_refused_not_ignored() -> None:
    from gpuemu_ci.lint.nvrtc import NvrtcUnsupported, translate_flags

    assert translate_flags(["-O3", "--use_fast_math", "-maxrregcount=32", "-lineinfo", "-Xptxas", "-v"]) == (
        ["--use_fast_math", "--generate-line-info"],
        ["-maxrregcount", "32", "-v"],
    )
    for flag in ("-G", "-rdc=true", "--relocatable-device-code=true", "-Wno-deprecated-gpu-targets", "-x"):
        with pytest.raises(NvrtcUnsupported, match="no NVRTC equivalent"):
            translate_flags([flag])


def test_the_write_project_helper_covers_every_fixture(tmp_path: Path) -> None:
    config = write_project(tmp_path, ("sm_80",))
    text = config.read_text()
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "ptx-lint" / "src"
    for source in fixtures.glob("*.cu"):
        assert f'source = "{source.name}"' in text
