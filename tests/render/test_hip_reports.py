"""Every report of a real `gpuemu-ci run` that lints HIP kernels (clang for AMD GPUs): the HTML report's table of
the AMDGPU compiler's figures, SARIF (valid against its schema) and annotations at the kernel's definition, JUnit,
and the comment and summary naming the failed check in the compiler's words."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from gpuemu_ci.render.annotations import render_annotations
from gpuemu_ci.render.html import render_html
from gpuemu_ci.render.junit import render_junit
from gpuemu_ci.render.sarif import render_sarif
from tests.lint.support_hip import EXAMPLE, requires_hip
from tests.render.test_ci_formats import check_sarif, report_of
from tests.support_cli import run_cli

pytestmark = [pytest.mark.slow, requires_hip]

CONFIG = """
[project]
name = "hip-reports"

[[kernels]]
name = "gelu"
source = "kernels/gelu.hip"
archs = ["gfx90a", "gfx1030"]

[[kernels]]
name = "horner_spill"
source = "kernels/horner_spill.hip"
archs = ["gfx90a"]
[kernels.artifact_checks]
max_registers = 32
"""


@pytest.fixture(scope="module")
def hip_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    project = tmp_path_factory.mktemp("hip-reports")
    shutil.copytree(EXAMPLE / "kernels", project / "kernels")
    (project / "gpuemu.toml").write_text(CONFIG)
    done = subprocess.run(
        [sys.executable, "-m", "gpuemu_ci", "run", "--config", "gpuemu.toml", "--out", "out"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=600,
        env={**__import__("os").environ, "GPUEMU_USER_CONFIG": "none"},
    )
    assert done.returncode == 1, done.stderr
    document: dict[str, Any] = json.loads((project / "out" / "results.json").read_text())
    return document, project


def _horner(document: dict[str, Any]) -> dict[str, Any]:
    kernel: dict[str, Any] = next(k for k in document["kernels"] if k["name"] == "horner_spill")
    return kernel


def test_the_html_report_tables_the_compilers_figures(hip_run: tuple[dict[str, Any], Path]) -> None:
    document, _ = hip_run
    html = render_html(report_of(document))
    assert "<th>VGPRs</th><th>AGPRs</th><th>SGPRs</th>" in html
    horner = _horner(document)["entries"][0]["amdgpu"]
    row = html.split("<code>horner_spill</code></td><td><code>horner_spill</code></td><td>gfx90a</td>", 1)[1]
    cells = row.split("</tr>", 1)[0]
    assert f'<td class="num">{horner["vgprs"]}</td>' in cells and "failed" in cells
    assert "<td>gfx1030</td>" in html  # one row per arch
    assert "<th>registers</th>" not in html  # no CUDA table for HIP kernels


def test_sarif_points_at_the_kernels_definition(
    hip_run: tuple[dict[str, Any], Path], sarif_validator: Any
) -> None:
    document, project = hip_run
    log = check_sarif(sarif_validator, render_sarif(report_of(document), source_root=project))
    (result,) = [r for r in log["runs"][0]["results"] if r["ruleId"] == "kernel/registers"]
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "kernels/horner_spill.hip"
    line = location["region"]["startLine"]
    source = (project / "kernels" / "horner_spill.hip").read_text().splitlines()
    assert source[line - 1].startswith("horner_spill(")
    assert "VGPRs" in result["message"]["text"] and result["properties"]["arch"] == "gfx90a"


def test_junit_annotations_comment_and_summary(hip_run: tuple[dict[str, Any], Path]) -> None:
    document, project = hip_run
    vgprs = _horner(document)["entries"][0]["amdgpu"]["vgprs"]
    message = f"horner_spill [gfx90a]: VGPRs {vgprs} exceeds max_registers = 32"
    root = ET.fromstring(render_junit(report_of(document)).encode())
    failures = [c for c in root.iter("testcase") if c.find("failure") is not None]
    assert any(
        message in (c.find("failure").get("message") or "") + (c.find("failure").text or "")  # type: ignore[union-attr]
        for c in failures
    )
    annotations = render_annotations(report_of(document))
    assert any(line.startswith("::error") and message in line for line in annotations.splitlines())
    results = project / "out" / "results.json"
    for kind in ("comment", "summary"):
        rendered = run_cli(["render", kind, results])
        assert rendered.code == 0 and "`horner_spill`" in rendered.stdout, rendered.output
    comment = run_cli(["render", "comment", results]).stdout
    assert f"| `horner_spill` | `horner_spill` | gfx90a | registers | 32 | {vgprs} | ❌ failed |" in comment
