"""The HTML report as a browser lays it out (issue #22, item 6): real Chromium, headless, on real runs' results.

A probe script measures the rendered page: numbers split over two lines, headings, the kernel metrics table,
horizontal overflow. `.ci/run` installs Debian's `chromium`; without it these tests are skipped, saying so."""

from __future__ import annotations

import html as html_module
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gpuemu_ci.render.html import render_html
from gpuemu_ci.results.codec import read_results
from gpuemu_ci.results.model import Results
from tests.support_real_runs import real_run, real_run_dir

CHROMIUM = next((found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))), None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium here: to run these, apt-get install chromium (.ci/run does)"
)

# Runs in the page after layout; leaves its measurements in an attribute that --dump-dom prints.
PROBE = r"""
<script>
const NUMBER = /(?<![\w.\/-])[-+]?\d[\d,]*(\.\d+)?(e[-+]?\d+)?(?![\w-])/g;  // numbers, not parts of names
const split = [];
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
  for (const match of node.data.matchAll(NUMBER)) {
    if (match[0].length < 2) continue;
    const range = document.createRange();
    range.setStart(node, match.index);
    range.setEnd(node, match.index + match[0].length);
    const tops = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
    if (tops.size > 1) split.push(match[0]);
  }
}
const tables = [...document.querySelectorAll("table.metrics")].map(t => ({
  headers: [...t.querySelectorAll("th")].map(th => th.textContent.trim()),
  rows: t.querySelectorAll("tr").length - 1,
  wrapped: [...t.querySelectorAll("td.num")].filter(td => td.getClientRects().length &&
      td.getBoundingClientRect().height > 2.2 * parseFloat(getComputedStyle(td).lineHeight)).length,
}));
document.body.setAttribute("data-layout", JSON.stringify({
  split: split,
  headings: [...document.querySelectorAll("h3")].map(h => h.textContent.trim()),
  tables: tables,
  overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
  maps: [...document.querySelectorAll("img.error-map")].map(i => ({
    natural: i.naturalWidth, shown: Math.round(i.getBoundingClientRect().width),
    right: Math.round(i.getBoundingClientRect().right), open: i.closest("details").open,
  })),
}));
</script>
"""


def layout(page: str, where: Path, width: int = 480) -> dict[str, Any]:
    """Chromium's measurements of `page` in a window `width` CSS pixels wide."""
    probed = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page)  # the probe is a script
    path = where / "report.html"
    path.write_text(probed.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    assert CHROMIUM is not None
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         f"--window-size={width},1000", "--virtual-time-budget=5000", "--dump-dom", path.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    found = re.search(r'data-layout="([^"]*)"', done.stdout)
    assert found, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(html_module.unescape(found.group(1)))
    return result


def page_of(document: dict[str, Any]) -> str:
    return render_html(msgspec.convert(document, type=Results, strict=False))


@pytest.mark.slow
def test_no_number_is_split_and_no_heading_repeats_itself(tmp_path_factory: pytest.TempPathFactory) -> None:
    document = real_run(tmp_path_factory.getbasetemp(), "mixed")
    assert any(op["failures"] for op in document["ops"])  # failure sections with seeds, errors, replay lines
    measured = layout(page_of(document), tmp_path_factory.mktemp("mixed"))
    assert measured["split"] == []
    assert measured["headings"]
    for heading in measured["headings"]:  # "softmax · float32: 6 of 16 cases failed", the op named once
        op = heading.split(" · ")[0]
        assert heading.count(op) == 1, heading
    assert measured["overflow"] <= 0  # nothing wider than the window


@pytest.mark.slow
def test_each_failing_case_shows_its_error_map_decoded_and_within_the_window(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    where = real_run_dir(tmp_path_factory.getbasetemp(), "failing")  # examples/buggy: softmax fails
    report = read_results(where / "results.json")
    maps = [f for op in report.ops for f in op.failures if f.error_map]
    assert maps
    measured = layout(render_html(report, results_dir=where), tmp_path_factory.mktemp("maps"))
    assert len(measured["maps"]) == len(maps)
    for drawn in measured["maps"]:
        assert drawn["natural"] > 100  # the browser decoded the inlined PNG
        if drawn["open"]:  # the first case of each group is open: its map is laid out within the window
            assert drawn["shown"] > 0 and drawn["right"] <= 480
    assert measured["overflow"] <= 0


@pytest.mark.slow
def test_the_kernel_table_shows_registers_and_spills_per_entry_and_arch(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    document = real_run(tmp_path_factory.getbasetemp(), "kernels")
    entries = [(k["name"], e) for k in document["kernels"] for e in k["entries"]]
    assert any(e["spill_stores"] for _, e in entries)  # the spilling fixture kernel is among them
    measured = layout(page_of(document), tmp_path_factory.mktemp("kernels"))
    (table,) = measured["tables"]
    assert {"kernel", "arch", "registers", "spill stores", "spill loads", "local memory"} <= set(
        table["headers"]
    )
    assert table["rows"] == len(entries) and table["wrapped"] == 0
    assert measured["split"] == [] and measured["overflow"] <= 0
